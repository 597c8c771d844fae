//! Reads the literals of a statement straight off its text.
//!
//! sqlparser's tokenizer walks a statement character by character and
//! tracks the line and column of each; for rows holding 2 KB strings that
//! was 40% of the time of an `INSERT … VALUES` load (benchmark W1), and
//! 29% of an ad hoc point read. Two kinds of statement need none of it:
//!
//! - an `INSERT … VALUES` of literals ([`scan_insert_values`]): its rows
//!   are found in one pass over the bytes and handed on as the expressions
//!   the parser would have made, so the same code reads them as parsed ones
//!   (`constant_insert`); the part before `VALUES` is parsed with one row of
//!   parameters;
//! - a `SELECT` ([`select_shape`]): its literals become parameters `$1, …`,
//!   and the text left is the statement's *shape*, which the session plans
//!   once and remembers (a point read runs straight from it).
//!
//! The scanner knows the generic dialect's literals only: strings in single
//! quotes (`''` for a quote, no backslash escapes), `X'…'` (in VALUES),
//! numbers, and in VALUES also `NULL`, `TRUE`, `FALSE` and `MAP {…}`.
//! Anything it is unsure of (a comment, another quoting style, a prefixed
//! string, something after the statement) makes it give up, and the
//! statement is parsed whole as before.

use std::borrow::Cow;

use datafusion::sql::sqlparser::ast::Value as SqlValue;

use crate::sql::values::literal::Literal;

/// An `INSERT … VALUES` of literals, as read off its text.
#[derive(Debug)]
pub(crate) struct ValuesText<'t> {
    /// The statement up to `VALUES`, e.g. `INSERT INTO t (a, b) `.
    pub head: &'t str,
    /// The rows, one literal per value, as the parser reads them.
    pub rows: Vec<Vec<Literal<'t>>>,
}

/// A `SELECT` with its literals taken out.
#[derive(Debug, PartialEq)]
pub(crate) struct SelectShape {
    /// The text with each literal replaced by `$1`, `$2`, … in order.
    pub template: String,
    /// The literals, as the parser reads them.
    pub literals: Vec<SqlValue>,
}

/// The shape of `text` when it is one `SELECT` statement (a `;` may end
/// it) whose literals the scanner can take out; `None` otherwise.
/// Strings and numbers are taken out (a minus stays in the text, as the
/// parser keeps it apart from its number); keywords such as `NULL` stay.
pub(crate) fn select_shape(text: &str) -> Option<SelectShape> {
    let mut scan = Scan::after_keyword(text, "SELECT")?;
    let mut template = String::with_capacity(text.len());
    let mut literals = Vec::new();
    let mut copied = 0;
    let mut placeholder = |scan: &Scan<'_>, start: usize, literal: SqlValue| {
        template.push_str(&text[copied..start]);
        literals.push(literal);
        template.push_str(&format!("${}", literals.len()));
        copied = scan.at;
    };
    while let Some(b) = scan.peek() {
        let start = scan.at;
        let after_word =
            start > 0 && (is_word_byte(scan.bytes[start - 1]) || scan.bytes[start - 1] == b'.');
        match b {
            b'\'' if !after_word => {
                let literal = SqlValue::SingleQuotedString(scan.string()?.into_owned());
                // `'a'x` is no literal the parser would read.
                if scan.peek().is_some_and(|b| is_word_byte(b) || b == b'\'') {
                    return None;
                }
                placeholder(&scan, start, literal);
            }
            b'0'..=b'9' if !after_word => {
                let literal = SqlValue::Number(scan.number()?.to_string(), false);
                placeholder(&scan, start, literal);
            }
            b'"' if !after_word => scan.quoted_identifier()?,
            b'"' | b'\'' | b'`' | b'$' | b'#' | b'@' | b'?' | b'\\' => return None,
            b'-' if scan.bytes.get(start + 1) == Some(&b'-') => return None,
            b'/' if scan.bytes.get(start + 1) == Some(&b'*') => return None,
            b';' => {
                scan.at += 1;
                scan.skip_space();
                if scan.at != scan.bytes.len() {
                    return None;
                }
            }
            _ if is_word_byte(b) => {
                while scan.peek().is_some_and(is_word_byte) {
                    scan.at += 1;
                }
            }
            _ => scan.at += 1,
        }
    }
    template.push_str(&text[copied..]);
    Some(SelectShape { template, literals })
}

/// The rows of `text` when it is one `INSERT … VALUES` statement of
/// literals (a `;` may end it); `None` otherwise.
pub(crate) fn scan_insert_values(text: &str) -> Option<ValuesText<'_>> {
    let mut scan = Scan::after_keyword(text, "INSERT")?;
    let values_at = scan.find_values()?;
    let head = &text[..values_at];
    let mut rows = Vec::new();
    loop {
        scan.skip_space();
        scan.expect(b'(')?;
        let mut row = Vec::new();
        loop {
            scan.skip_space();
            row.push(scan.value(true)?);
            scan.skip_space();
            match scan.bump()? {
                b',' => {}
                b')' => break,
                _ => return None,
            }
        }
        rows.push(row);
        scan.skip_space();
        if scan.peek() != Some(b',') {
            break;
        }
        scan.at += 1;
    }
    if scan.peek() == Some(b';') {
        scan.at += 1;
        scan.skip_space();
    }
    (scan.at == scan.bytes.len()).then_some(ValuesText { head, rows })
}

/// Bytes that continue an unquoted identifier or keyword (non-ASCII
/// letters included).
fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80
}

struct Scan<'t> {
    text: &'t str,
    bytes: &'t [u8],
    at: usize,
}

impl<'t> Scan<'t> {
    /// A scan of `text` just after its first word, when that word is
    /// `keyword` (in any case) after any leading space.
    fn after_keyword(text: &'t str, keyword: &str) -> Option<Self> {
        let mut scan = Scan {
            bytes: text.as_bytes(),
            text,
            at: 0,
        };
        scan.skip_space();
        scan.word()?.eq_ignore_ascii_case(keyword).then_some(scan)
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn bump(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.at += 1;
        Some(b)
    }

    fn expect(&mut self, b: u8) -> Option<()> {
        (self.bump()? == b).then_some(())
    }

    fn skip_space(&mut self) {
        while self.peek().is_some_and(|b| b.is_ascii_whitespace()) {
            self.at += 1;
        }
    }

    /// An unquoted word starting here.
    fn word(&mut self) -> Option<&'t str> {
        let start = self.at;
        if !self
            .peek()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_' || b >= 0x80)
        {
            return None;
        }
        while self.peek().is_some_and(is_word_byte) {
            self.at += 1;
        }
        Some(&self.text[start..self.at])
    }

    /// Moves past the first `VALUES` keyword and returns where it starts.
    /// Double-quoted identifiers are skipped; a string, a comment or
    /// another quoting style before it gives up.
    fn find_values(&mut self) -> Option<usize> {
        loop {
            let b = self.peek()?;
            match b {
                // A quote right after a word is a prefixed string (`r"…"`).
                b'"' if self.after_word() => return None,
                b'"' => self.quoted_identifier()?,
                // Strings, other quoting styles, dollar-quoted strings and
                // placeholders, and `@` and `#` (parts of identifiers).
                b'\'' | b'`' | b'[' | b'#' | b'$' | b'@' => return None,
                b'-' if self.bytes.get(self.at + 1) == Some(&b'-') => return None,
                b'/' if self.bytes.get(self.at + 1) == Some(&b'*') => return None,
                _ if b.is_ascii_alphabetic() || b == b'_' || b >= 0x80 => {
                    let start = self.at;
                    if self.word()?.eq_ignore_ascii_case("VALUES") {
                        return Some(start);
                    }
                }
                _ if is_word_byte(b) => {
                    while self.peek().is_some_and(is_word_byte) {
                        self.at += 1;
                    }
                }
                _ => self.at += 1,
            }
        }
    }

    /// Whether the byte before the current one continues a word.
    fn after_word(&self) -> bool {
        self.at > 0 && is_word_byte(self.bytes[self.at - 1])
    }

    /// Moves past a double-quoted identifier starting here (`""` stands
    /// for a quote).
    fn quoted_identifier(&mut self) -> Option<()> {
        self.expect(b'"')?;
        loop {
            match self.bump()? {
                b'"' if self.peek() == Some(b'"') => self.at += 1,
                b'"' => return Some(()),
                _ => {}
            }
        }
    }

    /// One value: a literal, or (when `maps`) a `MAP {…}` of literals.
    fn value(&mut self, maps: bool) -> Option<Literal<'t>> {
        match self.peek()? {
            b'\'' => Some(Literal::Str(self.string()?)),
            b'-' => {
                self.at += 1;
                self.skip_space();
                let digits = self.number()?;
                Some(Literal::Number {
                    digits,
                    negative: true,
                })
            }
            b'0'..=b'9' => Some(Literal::Number {
                digits: self.number()?,
                negative: false,
            }),
            b'x' | b'X' if self.bytes.get(self.at + 1) == Some(&b'\'') => {
                self.at += 1;
                match self.string()? {
                    Cow::Borrowed(hex) => Some(Literal::Hex(hex)),
                    // A quote among hex digits: the parser's to refuse.
                    Cow::Owned(_) => None,
                }
            }
            _ => {
                let word = self.word()?;
                if word.eq_ignore_ascii_case("NULL") {
                    Some(Literal::Null)
                } else if word.eq_ignore_ascii_case("TRUE") {
                    Some(Literal::Bool(true))
                } else if word.eq_ignore_ascii_case("FALSE") {
                    Some(Literal::Bool(false))
                } else if maps && word.eq_ignore_ascii_case("MAP") {
                    self.map()
                } else {
                    None
                }
            }
        }
    }

    /// `{key: value, …}` after `MAP`.
    fn map(&mut self) -> Option<Literal<'t>> {
        self.skip_space();
        self.expect(b'{')?;
        let mut entries = Vec::new();
        self.skip_space();
        if self.peek() == Some(b'}') {
            self.at += 1;
            return Some(Literal::Map(entries));
        }
        loop {
            self.skip_space();
            let key = self.value(false)?;
            self.skip_space();
            self.expect(b':')?;
            self.skip_space();
            let value = self.value(false)?;
            entries.push((key, value));
            self.skip_space();
            match self.bump()? {
                b',' => {}
                b'}' => return Some(Literal::Map(entries)),
                _ => return None,
            }
        }
    }

    /// A single-quoted string starting here; `''` stands for a quote.
    fn string(&mut self) -> Option<Cow<'t, str>> {
        self.expect(b'\'')?;
        let mut out: Option<String> = None;
        loop {
            let end = self.at + self.bytes[self.at..].iter().position(|&b| b == b'\'')?;
            let part = &self.text[self.at..end];
            self.at = end + 1;
            let doubled = self.peek() == Some(b'\'');
            match (&mut out, doubled) {
                // The common case: no quote inside, borrowed.
                (None, false) => return Some(Cow::Borrowed(part)),
                (None, true) => out = Some(format!("{part}'")),
                (Some(text), false) => {
                    text.push_str(part);
                    return out.map(Cow::Owned);
                }
                (Some(text), true) => {
                    text.push_str(part);
                    text.push('\'');
                }
            }
            if doubled {
                self.at += 1;
            }
        }
    }

    /// `digits[.digits][e[+-]digits]`, not followed by a word or a dot.
    fn number(&mut self) -> Option<&'t str> {
        let start = self.at;
        let digits = |scan: &mut Self| {
            let from = scan.at;
            while scan.peek().is_some_and(|b| b.is_ascii_digit()) {
                scan.at += 1;
            }
            scan.at > from
        };
        if !digits(self) {
            return None;
        }
        if self.peek() == Some(b'.') {
            self.at += 1;
            if !digits(self) {
                return None;
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.at += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.at += 1;
            }
            if !digits(self) {
                return None;
            }
        }
        if self.peek().is_some_and(|b| is_word_byte(b) || b == b'.') {
            return None;
        }
        Some(&self.text[start..self.at])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::parser::{DFParser, Statement as DfStatement};
    use datafusion::sql::sqlparser::ast::{Expr as SqlExpr, SetExpr, Statement};

    /// The rows sqlparser makes of `text`, for comparison.
    fn parsed_rows(text: &str) -> Vec<Vec<SqlExpr>> {
        let mut statements = DFParser::parse_sql(text).expect("parses");
        let Some(DfStatement::Statement(statement)) = statements.pop_front() else {
            panic!("not a statement: {text}");
        };
        let Statement::Insert(insert) = *statement else {
            panic!("not an INSERT: {text}");
        };
        let SetExpr::Values(values) = *insert.source.expect("a source").body else {
            panic!("not VALUES: {text}");
        };
        values.rows.into_iter().map(|row| row.content).collect()
    }

    #[test]
    fn reads_literals_as_the_parser_does() {
        for text in [
            "INSERT INTO t VALUES ('a', 1, -2, 3.5, 1e3, 2.5E-2, NULL, TRUE, false)",
            "insert into \"my values\" (a, \"b c\") values ('it''s', x'0aFF'), ('', X'')",
            "INSERT INTO t VALUES (MAP {'k': 'v', 'k2': NULL}, MAP {}, MAP{1:-1});",
            "INSERT INTO s.t(_key, n) VALUES\n ('é ünïcödé \"q\"', - 7) ,('x',0)  ;  ",
            "INSERT INTO t VALUES (18446744073709551616, 9223372036854775807, 0.000)",
            "INSERT INTO t VALUES ('''', 'a''''b', '''''', 'x''')",
        ] {
            let scanned = scan_insert_values(text).unwrap_or_else(|| panic!("scans: {text}"));
            let parsed = parsed_rows(text);
            let parsed: Vec<Vec<Literal<'_>>> = parsed
                .iter()
                .map(|row| {
                    row.iter()
                        .map(|e| Literal::of_expr(e).unwrap_or_else(|| panic!("{e}")))
                        .collect()
                })
                .collect();
            assert_eq!(scanned.rows, parsed, "{text}");
        }
    }

    #[test]
    fn a_select_shape_takes_out_strings_and_numbers() {
        let number = |n: &str| SqlValue::Number(n.into(), false);
        let string = |s: &str| SqlValue::SingleQuotedString(s.into());
        let cases = [
            (
                "SELECT * FROM t WHERE _key = 'a''b' AND n = -5;",
                "SELECT * FROM t WHERE _key = $1 AND n = -$2;",
                vec![string("a'b"), number("5")],
            ),
            (
                r#"select c1, "it's" from t2 where "x""1" = 'v' and t2.c3 > 1.5e3 limit 10"#,
                r#"select c1, "it's" from t2 where "x""1" = $1 and t2.c3 > $2 limit $3"#,
                vec![string("v"), number("1.5e3"), number("10")],
            ),
            ("SELECT 1 IS NULL", "SELECT $1 IS NULL", vec![number("1")]),
            ("SELECT * FROM t", "SELECT * FROM t", vec![]),
        ];
        for (text, template, literals) in cases {
            let shape = select_shape(text).unwrap_or_else(|| panic!("scans: {text}"));
            let want = SelectShape {
                template: template.into(),
                literals,
            };
            assert_eq!(shape, want, "{text}");
        }
        for text in [
            "SELECT * FROM t WHERE a = E'x'",
            "SELECT * FROM t WHERE a = X'00'",
            "SELECT * FROM t WHERE a = $1",
            "SELECT * FROM t WHERE a = 1 -- comment",
            "SELECT /* hint */ * FROM t",
            "SELECT * FROM `t`",
            "SELECT 1; SELECT 2",
            "SELECT 'unterminated",
            "SELECT 1.",
            "SELECT 0x1F",
            "WITH x AS (SELECT 1) SELECT * FROM x",
            "INSERT INTO t VALUES (1)",
            "SELECT * FROM t WHERE _key = 'a'x",
            "SELECT * FROM t WHERE x@1 = 2",
            "SELECT r\"\"\"a\"b\"\"\" FROM t WHERE _key = 'a'",
        ] {
            assert_eq!(select_shape(text), None, "{text}");
        }
    }

    #[test]
    fn the_head_is_the_text_before_values() {
        let scanned = scan_insert_values("INSERT INTO \"values\" VALUES (1)").expect("scans");
        assert_eq!(scanned.head, "INSERT INTO \"values\" ");
    }

    #[test]
    fn gives_up_on_anything_but_literals() {
        for text in [
            "INSERT INTO t VALUES (1 + 2)",
            "INSERT INTO t VALUES (now())",
            "INSERT INTO t VALUES (E'a')",
            "INSERT INTO t VALUES (N'a')",
            "INSERT INTO t VALUES ('a' 'b')",
            "INSERT INTO t VALUES ('a'::int)",
            "INSERT INTO t VALUES (1.)",
            "INSERT INTO t VALUES (.5)",
            "INSERT INTO t VALUES (1e)",
            "INSERT INTO t VALUES (0x1F)",
            "INSERT INTO t VALUES (--1\n)",
            "INSERT INTO t VALUES (1) -- done",
            "INSERT INTO t VALUES (1) /* done */",
            "INSERT INTO t VALUES (1) ON CONFLICT DO NOTHING",
            "INSERT INTO t VALUES (1); INSERT INTO t VALUES (2)",
            "INSERT INTO t VALUES (MAP {'a': MAP {}})",
            "INSERT INTO t VALUES ('unterminated)",
            "INSERT INTO t VALUES",
            "INSERT INTO t DEFAULT VALUES",
            "INSERT INTO t SELECT * FROM (VALUES (1)) AS v(a)",
            "INSERT INTO t SELECT 'VALUES' VALUES (1)",
            "INSERT /* c */ INTO t VALUES (1)",
            "INSERT INTO `t` VALUES (1)",
            "INSERT INTO t WITH c AS (SELECT $$\"$$) VALUES ('real', 1) -- \"VALUES ('fake', 2)",
            "INSERT INTO t@x VALUES (1)",
            "INSERT INTO r\"x\" VALUES (1)",
            "SELECT * FROM t",
            "UPDATE t SET a = 1",
        ] {
            assert!(scan_insert_values(text).is_none(), "{text}");
        }
    }
}
