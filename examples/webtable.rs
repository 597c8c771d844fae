//! The Bigtable paper's webtable: a generated web of linked HTML pages on a
//! few hundred sites in six languages, crawled four times a week apart.
//! Each crawl computes the MD5 of every page and parses (with `scraper`)
//! only the pages whose checksum changed; the row keys are reversed-domain
//! URLs, `contents` lives in its own locality group keeping three versions,
//! and the `anchor` family holds, in the linked page's row, one cell per
//! referring page (qualifier: the referrer's row key; value: the anchor
//! text). Then SQL: pages per language, checksums, the backlinks of a page,
//! inbound-link counts, old versions, and an export to Parquet read back.
//!
//! `cargo run --release --example webtable [DIR] [PAGES]` (DIR defaults to
//! `./widesql-data`, the command line's database, so that `cargo run
//! --release -- sql "..."` queries the table afterwards; PAGES to 3000).
//! Each run drops and rebuilds `web.crawl.webtable`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use md5::{Digest, Md5};
use scraper::{Html, Selector};
use widesql::export::ExportOptions;
use widesql::StatementOutput;
use widesql::{Db, FileFormat, Filter, RowMutation, Table};

type BoxError = Box<dyn std::error::Error>;

/// The table's three-part name: project `web`, dataset `crawl`.
pub const TABLE: &str = "web.crawl.webtable";
/// How many times the web is crawled.
pub const CRAWLS: usize = 4;
/// The day of each crawl (UTC midnight), a week apart.
pub const CRAWL_DATES: [&str; CRAWLS] = ["2025-01-06", "2025-01-13", "2025-01-20", "2025-01-27"];
/// The first crawl, 2025-01-06T00:00:00Z, in microseconds: crawls write
/// at explicit timestamps, so the versions carry the crawl dates.
const FIRST_CRAWL_MICROS: i64 = 1_736_121_600_000_000;
const WEEK_MICROS: i64 = 7 * 86_400 * 1_000_000;
/// The query exported to Parquet: the German sites, a key range.
pub const EXPORT_QUERY: &str =
    "SELECT _key, language, checksum, contents, anchor FROM web.crawl.webtable WHERE _key LIKE 'de.%'";
/// Pages when none are asked for.
const DEFAULT_PAGES: usize = 3000;

fn main() -> Result<(), BoxError> {
    let mut args = std::env::args().skip(1);
    let dir = args
        .next()
        .map_or_else(|| PathBuf::from("./widesql-data"), PathBuf::from);
    let pages = match args.next() {
        Some(n) => n.parse()?,
        None => DEFAULT_PAGES,
    };
    let db = Db::open(&dir)?;
    let export = std::env::temp_dir().join("webtable-de.parquet");
    print!("{}", run(&db, pages, &export)?);
    let db_option = if dir == Path::new("./widesql-data") {
        String::new()
    } else {
        format!("--db {} ", dir.display())
    };
    println!(
        "\nQuery it with the command line (from this directory):\n  cargo run --release -- {db_option}sql \"SELECT language, count(*) AS pages FROM {TABLE} GROUP BY language\"\n  cargo run --release -- {db_option}shell"
    );
    Ok(())
}

/// Builds the webtable in `db` from a web of `pages` pages, queries it,
/// exports the German sites to the Parquet file `export`, and returns
/// what it shows.
pub fn run(db: &Db, pages: usize, export: &Path) -> Result<String, BoxError> {
    let mut out = String::new();
    let runtime = tokio::runtime::Runtime::new()?;
    let session = db.session();
    let sql = |statement: &str| -> Result<String, BoxError> {
        let outputs = runtime.block_on(session.run(statement))?;
        Ok(outputs
            .iter()
            .map(StatementOutput::pretty)
            .collect::<widesql::Result<String>>()?)
    };

    let corpus = Corpus::generate(pages);
    let links: usize = corpus.pages.iter().map(|p| p.links.len()).sum();
    writeln!(out, "# The web")?;
    writeln!(
        out,
        "{} pages on {} sites in {} languages, {links} links; crawled {CRAWLS} times, weekly from {}",
        corpus.pages.len(),
        corpus.sites,
        LANGUAGES.len(),
        CRAWL_DATES[0]
    )?;

    // Dropped and made again, so that every run starts from an empty
    // table; contents in their own locality group, so that scans of
    // language or anchors never read the pages.
    writeln!(out, "\n# The table")?;
    sql(&format!(
        "CREATE DATABASE IF NOT EXISTS web;
         CREATE SCHEMA IF NOT EXISTS web.crawl;
         DROP TABLE IF EXISTS {TABLE};
         CREATE TABLE {TABLE} (
           _key     VARCHAR PRIMARY KEY,
           language VARCHAR,
           checksum VARCHAR,
           contents VARCHAR,
           anchor   MAP(VARCHAR, VARCHAR)
         ) WITH (
           'page.columns'        = 'contents',
           'page.max_versions'   = '3',
           'page.locality_group' = 'blobs',
           'anchor.max_versions' = '1'
         )"
    ))?;
    out.push_str(&sql(&format!("DESCRIBE {TABLE}"))?);
    let table = db.open_table("web", "crawl", "webtable")?;

    writeln!(
        out,
        "\n# Crawls: fetch, MD5, parse and write only what changed"
    )?;
    let parser = Parser::new()?;
    for (crawl, date) in CRAWL_DATES.iter().enumerate() {
        let started = Instant::now();
        let report = crawl_once(&table, &corpus, &parser, crawl)?;
        writeln!(
            out,
            "crawl {} on {}: {} pages fetched, {} new or changed, {} anchors written, {:.2} s",
            crawl + 1,
            date,
            report.fetched,
            report.changed,
            report.anchors,
            started.elapsed().as_secs_f64()
        )?;
    }

    writeln!(out, "\n# Pages per language")?;
    out.push_str(&sql(&format!(
        "SELECT language, count(*) AS pages FROM {TABLE} GROUP BY language ORDER BY pages DESC, language"
    ))?);

    writeln!(out, "\n# Checksums: the MD5 of each page's latest contents")?;
    out.push_str(&sql(&format!(
        "SELECT count(*) AS pages, sum(CASE WHEN md5(contents) = checksum THEN 1 ELSE 0 END) AS checksum_matches FROM {TABLE}"
    ))?);

    // The anchors of a page are in its own row, keyed by the referrer's
    // row key, so a backlink joins back to the page that holds the link.
    let article = corpus.pages[corpus.most_linked(false)].key();
    writeln!(out, "\n# Backlinks of {article}")?;
    out.push_str(&sql(&format!(
        "SELECT b.referrer, p.language, b.anchor_text
           FROM (SELECT unnest(map_keys(anchor)) AS referrer, unnest(map_values(anchor)) AS anchor_text
                   FROM {TABLE} WHERE _key = '{article}') b
           JOIN {TABLE} p ON p._key = b.referrer
          ORDER BY b.referrer"
    ))?);

    writeln!(out, "\n# Inbound links, top 10 (PageRank's input)")?;
    out.push_str(&sql(&format!(
        "SELECT _key, language, coalesce(cardinality(anchor), 0) AS inbound
           FROM {TABLE} ORDER BY inbound DESC, _key LIMIT 10"
    ))?);
    out.push_str(&sql(&format!(
        "SELECT sum(cardinality(anchor)) AS links, count(anchor) AS linked_pages FROM {TABLE}"
    ))?);

    let home = corpus.pages[corpus.most_linked(true)].key();
    writeln!(
        out,
        "\n# Versions of {home}: changed at every crawl; contents keeps 3, checksum all"
    )?;
    out.push_str(&sql(&format!(
        "SELECT _timestamp AS crawled, family, qualifier, octet_length(CAST(value AS VARCHAR)) AS bytes
           FROM cells('{TABLE}')
          WHERE _key = '{home}' AND qualifier IN ('contents', 'checksum')
          ORDER BY qualifier, crawled DESC"
    ))?);
    writeln!(out, "\n# Its previous version (history)")?;
    out.push_str(&sql(&format!(
        r#"SELECT regexp_match(contents[1], 'datetime="([0-9-]+)"')[1] AS latest_edit,
                  regexp_match(contents[2], 'datetime="([0-9-]+)"')[1] AS previous_edit,
                  contents[1] <> contents[2] AS differ,
                  checksum[2] AS previous_checksum
             FROM history('{TABLE}', 2) WHERE _key = '{home}'"#
    ))?);
    writeln!(out, "\n# It as of 2025-01-15 (as_of)")?;
    out.push_str(&sql(&format!(
        r#"SELECT regexp_match(contents, 'datetime="([0-9-]+)"')[1] AS edit, checksum
             FROM as_of('{TABLE}', TIMESTAMP '2025-01-15T00:00:00') WHERE _key = '{home}'"#
    ))?);

    writeln!(out, "\n# Export to Parquet")?;
    let started = Instant::now();
    let written = runtime.block_on(session.export(
        EXPORT_QUERY,
        export,
        FileFormat::Parquet,
        ExportOptions::default(),
        |_| {},
    ))?;
    writeln!(
        out,
        "{EXPORT_QUERY}\n  -> {}: {} rows, {} bytes, {:.2} s",
        export.display(),
        written.rows,
        written.bytes,
        started.elapsed().as_secs_f64()
    )?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(export)?)?;
    let row_groups = reader.metadata().num_row_groups();
    let columns: Vec<String> = reader
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    let mut rows = 0;
    for batch in reader.build()? {
        rows += batch?.num_rows();
    }
    writeln!(
        out,
        "read back: {rows} rows in {row_groups} row group(s), columns {}",
        columns.join(", ")
    )?;
    Ok(out)
}

/// What one crawl did.
struct CrawlReport {
    fetched: usize,
    changed: usize,
    anchors: usize,
}

/// Crawls every page once at the time of crawl number `crawl`: a page
/// whose MD5 equals the stored checksum is left alone; a changed page is
/// parsed, and its language, checksum, contents and its links' anchors (in
/// the linked pages' rows) go to the table in one bulk write.
fn crawl_once(
    table: &Table,
    corpus: &Corpus,
    parser: &Parser,
    crawl: usize,
) -> Result<CrawlReport, BoxError> {
    let at = FIRST_CRAWL_MICROS + WEEK_MICROS * crawl as i64;
    let checksum_only = Filter::all().with_families(["cf"]);
    let mut rows: BTreeMap<String, RowMutation> = BTreeMap::new();
    let mut report = CrawlReport {
        fetched: 0,
        changed: 0,
        anchors: 0,
    };
    for page in 0..corpus.pages.len() {
        let (url, html) = corpus.fetch(page, crawl);
        report.fetched += 1;
        let checksum = format!("{:x}", Md5::digest(html.as_bytes()));
        let key = row_key(&url).ok_or_else(|| format!("not an http URL: {url}"))?;
        let stored = table.read_row(key.as_bytes(), &checksum_only)?;
        if stored.as_ref().and_then(|r| r.value("cf", b"checksum")) == Some(checksum.as_bytes()) {
            continue;
        }
        report.changed += 1;
        let parsed = parser.parse(&url, &html)?;
        change(&mut rows, &key, |m| {
            m.set_at("cf", "language", at, &parsed.language)
                .set_at("cf", "checksum", at, &checksum)
                .set_at("page", "contents", at, &html)
        });
        for (target, text) in &parsed.links {
            let target = row_key(target).ok_or_else(|| format!("not an http URL: {target}"))?;
            change(&mut rows, &target, |m| m.set_at("anchor", &key, at, text));
            report.anchors += 1;
        }
    }
    table.bulk_mutate(rows)?;
    Ok(report)
}

/// Adds to the mutation of row `key`.
fn change(
    rows: &mut BTreeMap<String, RowMutation>,
    key: &str,
    add: impl FnOnce(RowMutation) -> RowMutation,
) {
    let mutation = rows.entry(key.to_string()).or_default();
    *mutation = add(std::mem::take(mutation));
}

/// The row key of an http(s) URL: the host reversed, then the path
/// (`https://www.cnn.com/index.html` -> `com.cnn.www/index.html`), so that
/// the pages of a site, and the sites of a domain, are neighbours.
pub fn row_key(url: &str) -> Option<String> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))?;
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let host: Vec<&str> = host.split('.').rev().collect();
    Some(format!(
        "{}{}",
        host.join("."),
        if path.is_empty() { "/" } else { path }
    ))
}

/// `href` made absolute against the page at `base` (absolute or
/// site-relative links; the generator writes no others).
fn resolve(base: &str, href: &str) -> Option<String> {
    if href.starts_with("https://") || href.starts_with("http://") {
        return Some(href.to_string());
    }
    let path = href.strip_prefix('/')?;
    let scheme_end = base.find("://")? + 3;
    let host_end = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |i| scheme_end + i);
    Some(format!("{}/{path}", &base[..host_end]))
}

/// What the crawler takes from a page.
struct Parsed {
    language: String,
    /// (absolute URL, anchor text) of every link.
    links: Vec<(String, String)>,
}

/// The HTML parser with its selectors compiled once.
struct Parser {
    link: Selector,
}

impl Parser {
    fn new() -> Result<Self, BoxError> {
        Ok(Self {
            link: Selector::parse("a[href]")?,
        })
    }

    fn parse(&self, url: &str, html: &str) -> Result<Parsed, BoxError> {
        let document = Html::parse_document(html);
        let language = document
            .root_element()
            .value()
            .attr("lang")
            .unwrap_or_default()
            .to_string();
        let mut links = Vec::new();
        for a in document.select(&self.link) {
            let href = a.value().attr("href").unwrap_or_default();
            let target =
                resolve(url, href).ok_or_else(|| format!("link '{href}' on {url} not resolved"))?;
            links.push((target, a.text().collect::<String>().trim().to_string()));
        }
        Ok(Parsed { language, links })
    }
}

/// A language of the generated web: its code, the top-level domains of its
/// sites, its share of the sites (per cent) and the words of its pages
/// (separated by spaces).
struct Language {
    code: &'static str,
    tlds: &'static [&'static str],
    share: u64,
    words: &'static str,
}

const LANGUAGES: [Language; 6] = [
    Language {
        code: "en",
        tlds: &["com", "org", "net"],
        share: 40,
        words: "the news city market river music garden train report weather story school future island coffee",
    },
    Language {
        code: "de",
        tlds: &["de"],
        share: 16,
        words: "die Stadt Markt Fluss Musik Garten Zug Bericht Wetter Geschichte Schule Zukunft Insel Kaffee heute",
    },
    Language {
        code: "fr",
        tlds: &["fr"],
        share: 14,
        words: "la ville marché rivière musique jardin train rapport météo histoire école avenir île café demain",
    },
    Language {
        code: "es",
        tlds: &["es"],
        share: 12,
        words: "la ciudad mercado río música jardín tren informe tiempo historia escuela futuro isla café hoy",
    },
    Language {
        code: "ja",
        tlds: &["jp"],
        share: 10,
        words: "東京 ニュース 市場 川 音楽 庭 電車 天気 学校 未来 島 珈琲 物語 今日 報告",
    },
    Language {
        code: "pt",
        tlds: &["br"],
        share: 8,
        words: "a cidade mercado rio música jardim trem relatório tempo história escola futuro ilha café hoje",
    },
];

const SYLLABLES: [&str; 20] = [
    "ka", "lu", "mo", "ri", "ne", "to", "sa", "vi", "do", "pe", "zu", "ba", "fi", "go", "ha", "ji",
    "ko", "ma", "no", "wa",
];
const SECTIONS: [&str; 6] = ["news", "sport", "tech", "travel", "food", "culture"];

/// A 64-bit linear congruential generator (Knuth's MMIX constants): the
/// same seed gives the same web on every machine.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn unit(&mut self) -> f64 {
        self.next() as f64 / (1u64 << 31) as f64
    }
}

/// A link on a page.
pub struct Link {
    /// The linked page (an index into [`Corpus::pages`]).
    pub target: usize,
    /// The anchor text.
    pub text: String,
}

/// A generated page.
pub struct Page {
    /// `www.<site>.<tld>`.
    pub host: String,
    /// `/index.html` for a site's home page, else `/<section>/<n>.html`.
    pub path: String,
    /// The index of the page's language in the language list.
    language: usize,
    /// The headline (a home page's is its site's name).
    pub headline: String,
    /// The site's name, capitalised.
    pub site_name: String,
    /// Its links, to distinct other pages; the same at every crawl.
    pub links: Vec<Link>,
    /// Whether crawl i finds it changed (always at the first crawl; home
    /// pages change every week, articles now and then).
    pub edited: [bool; CRAWLS],
}

impl Page {
    /// `https://host/path`.
    pub fn url(&self) -> String {
        format!("https://{}{}", self.host, self.path)
    }

    /// The row key of its URL.
    pub fn key(&self) -> String {
        let host: Vec<&str> = self.host.split('.').rev().collect();
        format!("{}{}", host.join("."), self.path)
    }

    /// The `lang` of its `<html>`.
    pub fn language(&self) -> &'static str {
        LANGUAGES[self.language].code
    }

    /// Whether it is its site's home page.
    pub fn is_home(&self) -> bool {
        self.path == "/index.html"
    }

    /// The last crawl, up to `crawl`, that found it changed.
    pub fn last_edit(&self, crawl: usize) -> usize {
        (0..=crawl).rev().find(|&c| self.edited[c]).unwrap_or(0)
    }
}

/// The generated web.
pub struct Corpus {
    /// Every page; the first `sites` are the sites' home pages.
    pub pages: Vec<Page>,
    /// How many sites.
    pub sites: usize,
}

impl Corpus {
    /// A web of `pages` pages (at least one) on about a tenth as many
    /// sites; the same for the same count.
    pub fn generate(pages: usize) -> Corpus {
        let pages = pages.max(1);
        let sites = (pages / 10).clamp(1, 8000);
        let mut rng = Lcg(0x5eed_2006);
        let mut site_of = Vec::with_capacity(sites);
        for site in 0..sites {
            let mut pick = rng.below(100) as u64;
            let language = LANGUAGES
                .iter()
                .position(|l| {
                    let hit = pick < l.share;
                    pick = pick.saturating_sub(l.share);
                    hit
                })
                .unwrap_or(0);
            let tlds = LANGUAGES[language].tlds;
            let tld = tlds[rng.below(tlds.len())];
            // 7919 is prime to 8000: distinct names for distinct sites.
            let mut n = (site * 7919 + 4321) % 8000;
            let mut name = String::new();
            for _ in 0..3 {
                name.push_str(SYLLABLES[n % 20]);
                n /= 20;
            }
            site_of.push((format!("www.{name}.{tld}"), capitalise(&name), language));
        }
        let mut corpus = Corpus {
            pages: Vec::with_capacity(pages),
            sites,
        };
        let mut pages_of_site = vec![Vec::new(); sites];
        let mut site_of_page = Vec::with_capacity(pages);
        for page in 0..pages {
            let site = if page < sites { page } else { rng.below(sites) };
            site_of_page.push(site);
            let (host, site_name, language) = &site_of[site];
            let words: Vec<&str> = LANGUAGES[*language].words.split(' ').collect();
            let (path, headline) = if page < sites {
                ("/index.html".to_string(), site_name.clone())
            } else {
                let headline: Vec<&str> = (0..3).map(|_| words[rng.below(words.len())]).collect();
                (
                    format!("/{}/{page}.html", SECTIONS[rng.below(SECTIONS.len())]),
                    capitalise(&headline.join(" ")),
                )
            };
            let mut edited = [true; CRAWLS];
            for e in edited.iter_mut().skip(1) {
                *e = page < sites || rng.unit() < 0.2;
            }
            pages_of_site[site].push(page);
            corpus.pages.push(Page {
                host: host.clone(),
                path,
                language: *language,
                headline,
                site_name: site_name.clone(),
                links: Vec::new(),
                edited,
            });
        }
        for (page, &site) in site_of_page.iter().enumerate() {
            let count = 3 + rng.below(6);
            let mut links: Vec<Link> = Vec::new();
            for _ in 0..count {
                // Within the site, or anywhere with a bias towards the
                // first pages (home pages first): a few pages get most
                // links, as on the web.
                let target = if rng.below(10) < 4 {
                    pages_of_site[site][rng.below(pages_of_site[site].len())]
                } else {
                    let u = rng.unit();
                    ((pages as f64 * u * u) as usize).min(pages - 1)
                };
                if target == page || links.iter().any(|l| l.target == target) {
                    continue;
                }
                let linked = &corpus.pages[target];
                let text = if rng.below(10) < 7 {
                    linked.headline.clone()
                } else {
                    linked.site_name.clone()
                };
                links.push(Link { target, text });
            }
            corpus.pages[page].links = links;
        }
        corpus
    }

    /// Page `page` as crawl `crawl` finds it: its URL and HTML. The HTML is
    /// that of its last edit, so an unchanged page has the same bytes.
    pub fn fetch(&self, page: usize, crawl: usize) -> (String, String) {
        let p = &self.pages[page];
        let edit = p.last_edit(crawl);
        let words: Vec<&str> = LANGUAGES[p.language].words.split(' ').collect();
        let mut rng = Lcg(((page as u64) << 8) | edit as u64);
        let date = CRAWL_DATES[edit];
        let title = if p.is_home() {
            p.site_name.clone()
        } else {
            format!("{} | {}", p.headline, p.site_name)
        };
        let mut html = format!(
            "<!DOCTYPE html>\n<html lang=\"{}\">\n<head><meta charset=\"utf-8\"><title>{title}</title></head>\n<body>\n<h1>{}</h1>\n<p class=\"updated\"><time datetime=\"{date}\">{date}</time></p>\n",
            p.language(),
            p.headline
        );
        for paragraph in 0..3 {
            html.push_str("<p>");
            let mut here = p.links.iter().skip(paragraph).step_by(3);
            let count = 20 + rng.below(20);
            for i in 0..count {
                if i > 0 {
                    html.push(' ');
                }
                html.push_str(words[rng.below(words.len())]);
                if i % 7 == 3 {
                    if let Some(link) = here.next() {
                        html.push_str(&self.anchor(p, link));
                    }
                }
            }
            for link in here {
                html.push_str(&self.anchor(p, link));
            }
            html.push_str(".</p>\n");
        }
        html.push_str("</body>\n</html>\n");
        (p.url(), html)
    }

    /// The `<a>` element of `link` on page `from`: site-relative within a
    /// site, absolute across sites.
    fn anchor(&self, from: &Page, link: &Link) -> String {
        let target = &self.pages[link.target];
        let href = if target.host == from.host {
            target.path.clone()
        } else {
            target.url()
        };
        format!(" <a href=\"{href}\">{}</a>", link.text)
    }

    /// Every page's referrers: (referrer, anchor text) of each link to it.
    pub fn backlinks(&self) -> Vec<Vec<(usize, String)>> {
        let mut backlinks = vec![Vec::new(); self.pages.len()];
        for (page, p) in self.pages.iter().enumerate() {
            for link in &p.links {
                backlinks[link.target].push((page, link.text.clone()));
            }
        }
        backlinks
    }

    /// The most linked home page (`home`) or article; ties go to the
    /// smaller row key.
    pub fn most_linked(&self, home: bool) -> usize {
        let backlinks = self.backlinks();
        let keys: BTreeSet<(std::cmp::Reverse<usize>, String, usize)> = self
            .pages
            .iter()
            .enumerate()
            .filter(|(_, p)| p.is_home() == home)
            .map(|(i, p)| (std::cmp::Reverse(backlinks[i].len()), p.key(), i))
            .collect();
        keys.first().map_or(0, |(_, _, i)| *i)
    }
}

/// `word` with its first letter in upper case.
fn capitalise(word: &str) -> String {
    let mut chars = word.chars();
    chars.next().map_or_else(String::new, |first| {
        first.to_uppercase().chain(chars).collect()
    })
}
