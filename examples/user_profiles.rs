//! User profiles and event sequences, as a social app keeps them: one row
//! per user, a `profile` family whose qualifiers are whatever attributes a
//! user has (no NULLs stored for the rest), and an `events` family where
//! every event is a version of one cell, stamped with the time it happened
//! (supplied by the writer, arriving out of order). Reads ask for a time
//! range or the latest N events, through the embedded API and through SQL's
//! version views; the family's TTL hides old events from every read at once,
//! before any compaction.
//!
//! `cargo run --release --example user_profiles [DIR]` (a temporary
//! directory unless DIR is given).

use std::fmt::Write as _;
use std::time::Duration;

use widesql::StatementOutput;
use widesql::{
    Db, DbOptions, FamilySpec, Filter, ReadOptions, RowMutation, RowSet, Table, TableSpec,
    ValueType,
};

const MINUTE: i64 = 60_000_000;
const HOUR: i64 = 60 * MINUTE;
const DAY: i64 = 24 * HOUR;

/// The events family's TTL when the table is made.
pub const FIRST_TTL_DAYS: i64 = 30;
/// The TTL it is tightened to later.
pub const SECOND_TTL_DAYS: i64 = 7;
/// How many events "the latest N" reads ask for.
pub const LATEST: usize = 5;
/// The time-range read: events between these many days ago (older, newer).
pub const RANGE_DAYS: (i64, i64) = (20, 2);
/// The table, as SQL names it.
pub const TABLE: &str = "pins.app.users";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = std::env::args()
        .nth(1)
        .map_or_else(|| dir.path().join("db"), Into::into);
    // Background compaction off, so that what the TTL hides stays on disk
    // until the example compacts and counts it.
    let db = Db::open_with(&path, DbOptions::new().with_compaction_interval(None))?;
    print!("{}", run(&db, widesql::wall_micros())?);
    Ok(())
}

/// The users and their attributes: each user has a different set.
pub fn profiles() -> Vec<(&'static str, Vec<(&'static str, &'static str)>)> {
    vec![
        (
            "user#ada",
            vec![
                ("name", "Ada"),
                ("country", "IS"),
                ("lang", "is"),
                ("pronouns", "she/her"),
                ("interests", "knitting,hiking"),
            ],
        ),
        (
            "user#bo",
            vec![("name", "Bo"), ("country", "SE"), ("birth_year", "1990")],
        ),
        (
            "user#cy",
            vec![
                ("name", "Cy Ceramics"),
                ("business", "true"),
                ("website", "cy.example"),
                ("category", "ceramics"),
            ],
        ),
        ("user#dee", vec![("name", "Dee")]),
    ]
}

/// One event: whose, when it happened (µs), what it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The user's row key.
    pub user: &'static str,
    /// When it happened, microseconds since 1970: the cell's timestamp.
    pub at: i64,
    /// What happened, e.g. `save pin/1234`.
    pub action: String,
}

/// The events in the order they arrive, which is not the order they
/// happened in: a tiny fixed-seed LCG picks times within the last 40 days
/// (always at half past an hour before `now`, so no event sits on a TTL
/// boundary while the example runs) and actions.
pub fn events(now: i64) -> Vec<Event> {
    let mut state: u64 = 0x5EED;
    let mut next = move |bound: u64| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) % bound
    };
    let verbs = ["view", "save", "click", "search", "follow"];
    let mut out: Vec<Event> = Vec::new();
    for (user, count) in [
        ("user#ada", 12),
        ("user#bo", 8),
        ("user#cy", 7),
        ("user#dee", 4),
    ] {
        let mut made = 0;
        while made < count {
            let hours = i64::try_from(next(40 * 24)).unwrap_or(0);
            let at = now - hours * HOUR - 30 * MINUTE;
            // One version per timestamp and cell: a second event at the
            // same time would replace the first.
            if out.iter().any(|e| e.user == user && e.at == at) {
                continue;
            }
            let verb = verbs[usize::try_from(next(5)).unwrap_or(0)];
            let action = format!("{verb} pin/{}", 1000 + next(9000));
            out.push(Event { user, at, action });
            made += 1;
        }
    }
    out
}

/// `3d 04h30m ago`.
fn ago(now: i64, at: i64) -> String {
    let age = now - at;
    format!(
        "{}d {:02}h{:02}m ago",
        age / DAY,
        age % DAY / HOUR,
        age % HOUR / MINUTE
    )
}

/// A user's events as a row read returns them, newest first.
fn read_events(table: &Table, user: &str, filter: Filter) -> widesql::Result<Vec<(i64, String)>> {
    let filter = filter.with_families(["events"]);
    Ok(table
        .read_row(user.as_bytes(), &filter)?
        .map(|row| {
            row.cells
                .into_iter()
                .map(|c| (c.timestamp, String::from_utf8_lossy(&c.value).into_owned()))
                .collect()
        })
        .unwrap_or_default())
}

/// Runs the tour on `db` with `now` (µs, the wall clock) as the present,
/// and returns what it shows.
pub fn run(db: &Db, now: i64) -> Result<String, Box<dyn std::error::Error>> {
    let mut out = String::new();
    let runtime = tokio::runtime::Runtime::new()?;
    let session = db.session();
    let sql = |statement: &str| -> Result<String, Box<dyn std::error::Error>> {
        let outputs = runtime.block_on(session.run(statement))?;
        Ok(outputs
            .iter()
            .map(StatementOutput::pretty)
            .collect::<widesql::Result<String>>()?)
    };

    // Free-form UTF-8 qualifiers in both families: SQL shows each as a
    // MAP(VARCHAR, VARCHAR) column.
    let users = db
        .create_project("pins")?
        .create_dataset("app")?
        .create_table(
            "users",
            TableSpec::new()
                .with_family(
                    FamilySpec::new("profile")
                        .with_qualifier_type(Some(ValueType::Utf8))
                        .with_max_versions(1),
                )
                .with_family(
                    FamilySpec::new("events")
                        .with_qualifier_type(Some(ValueType::Utf8))
                        .with_max_age(Duration::from_secs(
                            u64::try_from(FIRST_TTL_DAYS * 86_400).unwrap_or(0),
                        )),
                ),
        )?;
    writeln!(
        out,
        "# {TABLE}: family profile (free qualifiers, newest version), family events (TTL {FIRST_TTL_DAYS}d)"
    )?;

    writeln!(
        out,
        "\n# Sparse profiles: each user stores only the attributes it has"
    )?;
    for (user, attributes) in profiles() {
        let mutation = attributes
            .iter()
            .fold(RowMutation::new(), |m, (q, v)| m.set("profile", q, v));
        users.mutate_row(user.as_bytes(), &mutation)?;
        let names: Vec<&str> = attributes.iter().map(|(q, _)| *q).collect();
        writeln!(out, "{user:<9} {}", names.join(", "))?;
    }
    out.push_str(&sql(&format!(
        "SELECT _key, profile['name'] AS name, profile['country'] AS country, \
         profile['website'] AS website FROM {TABLE} ORDER BY _key"
    ))?);
    writeln!(
        out,
        "Stored profile cells per user (no cell for a missing attribute):"
    )?;
    out.push_str(&sql(&format!(
        "SELECT _key, count(*) AS cells FROM cells('{TABLE}') WHERE family = 'profile' \
         GROUP BY _key ORDER BY _key"
    ))?);
    writeln!(out, "Users with a website, found through the MAP column:")?;
    out.push_str(&sql(&format!(
        "SELECT _key, profile['website'] AS website FROM {TABLE} \
         WHERE profile['website'] IS NOT NULL"
    ))?);

    writeln!(
        out,
        "\n# Events arrive out of order, each written at the time it happened"
    )?;
    let events = events(now);
    for event in &events {
        users.mutate_row(
            event.user.as_bytes(),
            &RowMutation::new().set_at("events", "action", event.at, &event.action),
        )?;
    }
    let ada: Vec<&Event> = events.iter().filter(|e| e.user == "user#ada").collect();
    writeln!(out, "user#ada's {} events in arrival order:", ada.len())?;
    for event in &ada {
        writeln!(out, "  {:<18} {}", ago(now, event.at), event.action)?;
    }
    writeln!(out, "user#ada as the table returns them, newest first:")?;
    let visible = read_events(&users, "user#ada", Filter::all())?;
    for (at, action) in &visible {
        writeln!(out, "  {:<18} {action}", ago(now, *at))?;
    }
    let hidden = ada.len() - visible.len();
    writeln!(
        out,
        "user#ada: {} events written, {} returned; older than the {FIRST_TTL_DAYS}d TTL, \
         on disk (never compacted) and returned by no read: {hidden}",
        ada.len(),
        visible.len()
    )?;

    writeln!(
        out,
        "\n# The latest {LATEST} events (embedded: a newest-N filter)"
    )?;
    let latest = ReadOptions::new().with_filter(
        Filter::all()
            .with_families(["events"])
            .with_latest_versions(LATEST),
    );
    for row in users.read_rows(&RowSet::prefix("user#"), latest)? {
        let row = row?;
        let shown: Vec<String> = row
            .cells
            .iter()
            .map(|c| {
                format!(
                    "{} ({})",
                    String::from_utf8_lossy(&c.value),
                    ago(now, c.timestamp)
                )
            })
            .collect();
        writeln!(out, "{}", String::from_utf8_lossy(&row.key))?;
        for line in shown {
            writeln!(out, "  {line}")?;
        }
    }
    writeln!(
        out,
        "The same through SQL: history() with {LATEST} versions"
    )?;
    out.push_str(&sql(&format!(
        "SELECT _key, events['action'] AS latest FROM history('{TABLE}', {LATEST}) ORDER BY _key"
    ))?);
    writeln!(out, "and cells(), newest first, with their age:")?;
    out.push_str(&sql(&format!(
        "SELECT CAST(value AS VARCHAR) AS action, round(({now} - CAST(_timestamp AS BIGINT)) / 3600e6, 1) AS hours_ago \
         FROM cells('{TABLE}') WHERE _key = 'user#ada' AND family = 'events' \
         ORDER BY _timestamp DESC LIMIT {LATEST}"
    ))?);

    let (older, newer) = RANGE_DAYS;
    let (from, to) = (now - older * DAY, now - newer * DAY);
    writeln!(
        out,
        "\n# user#ada's events between {older} and {newer} days ago (a time-range filter)"
    )?;
    for (at, action) in read_events(&users, "user#ada", Filter::all().with_time_range(from..to))? {
        writeln!(out, "  {:<18} {action}", ago(now, at))?;
    }
    writeln!(out, "The same through SQL: a _timestamp range on cells()")?;
    out.push_str(&sql(&format!(
        "SELECT CAST(value AS VARCHAR) AS action, round(({now} - CAST(_timestamp AS BIGINT)) / 3600e6, 1) AS hours_ago \
         FROM cells('{TABLE}') WHERE _key = 'user#ada' AND family = 'events' \
         AND _timestamp >= to_timestamp_micros({from}) AND _timestamp < to_timestamp_micros({to}) \
         ORDER BY _timestamp DESC"
    ))?);

    writeln!(
        out,
        "\n# The TTL tightened from {FIRST_TTL_DAYS}d to {SECOND_TTL_DAYS}d: older events vanish at once"
    )?;
    let count_query = format!(
        "SELECT _key, count(*) AS events FROM cells('{TABLE}') WHERE family = 'events' \
         GROUP BY _key ORDER BY _key"
    );
    writeln!(out, "before:")?;
    out.push_str(&sql(&count_query)?);
    sql(&format!(
        "ALTER TABLE {TABLE} SET ('events.ttl' = '{SECOND_TTL_DAYS}d')"
    ))?;
    writeln!(
        out,
        "after ALTER TABLE {TABLE} SET ('events.ttl' = '{SECOND_TTL_DAYS}d'):"
    )?;
    out.push_str(&sql(&count_query)?);
    writeln!(out, "user#ada now:")?;
    for (at, action) in read_events(&users, "user#ada", Filter::all())? {
        writeln!(out, "  {:<18} {action}", ago(now, at))?;
    }
    let removed = users.compact()?;
    writeln!(
        out,
        "compaction then removed {removed} event cells that reads already hid; \
         reads are unchanged"
    )?;
    Ok(out)
}
