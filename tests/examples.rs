//! The examples run, and show what they say they show.

mod common;

/// Every row of a query as display strings (the examples' error type).
fn query(db: &widesql::Db, sql: &str) -> Result<Vec<Vec<String>>, Box<dyn std::error::Error>> {
    common::query(db, sql).map_err(|e| e as Box<dyn std::error::Error>)
}

#[expect(dead_code, reason = "the example's own main is not called here")]
#[path = "../examples/catalog_admin.rs"]
mod catalog_admin;

#[expect(dead_code, reason = "the example's own main is not called here")]
#[path = "../examples/webtable.rs"]
mod webtable;

#[test]
fn catalog_admin_creates_lists_renames_and_drops() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let db = widesql::Db::open(dir.path().join("db"))?;
    let shown = catalog_admin::run(&db)?;
    for expected in [
        "created acme.metrics.events",
        "created acme.logs.lines with 2 rows",
        "    table events  cf [default], raw [blobs]",
        "| lines ",
        "now acme.telemetry.events_v2",
        "DROP without CASCADE refused:",
        "_projects",
        "ffffffff-ffff-0000-0000-00000000000",
    ] {
        assert!(shown.contains(expected), "'{expected}' not in:\n{shown}");
    }
    let projects: Vec<String> = db
        .projects()?
        .iter()
        .map(|p| p.name())
        .collect::<Result<_, _>>()?;
    assert!(!projects.contains(&"acme".to_string()), "{projects:?}");
    Ok(())
}

#[test]
fn webtable_crawls_keeps_versions_backlinks_and_exports() -> Result<(), Box<dyn std::error::Error>>
{
    use datafusion::arrow::util::display::array_value_to_string;
    use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use md5::Digest as _;
    use std::collections::{BTreeMap, BTreeSet};

    let dir = tempfile::tempdir()?;
    let db = widesql::Db::open(dir.path().join("db"))?;
    let export = dir.path().join("de.parquet");
    let pages = 300;
    // Twice: a second run starts again from an empty table.
    webtable::run(&db, pages, &export)?;
    let shown = webtable::run(&db, pages, &export)?;
    let corpus = webtable::Corpus::generate(pages);
    let runtime = tokio::runtime::Runtime::new()?;
    let session = db.session();
    let rows = |sql: &str| -> Result<Vec<Vec<String>>, Box<dyn std::error::Error>> {
        let frame = runtime.block_on(session.sql(sql))?;
        let mut rows = Vec::new();
        for batch in runtime.block_on(frame.collect())? {
            for row in 0..batch.num_rows() {
                let values = batch
                    .columns()
                    .iter()
                    .map(|c| array_value_to_string(c, row));
                rows.push(values.collect::<Result<_, _>>()?);
            }
        }
        Ok(rows)
    };

    // Pages per language: what the generator wrote in <html lang>.
    let mut expected: BTreeMap<String, usize> = BTreeMap::new();
    for page in &corpus.pages {
        *expected.entry(page.language().to_string()).or_default() += 1;
    }
    let mut stored = BTreeMap::new();
    for row in rows("SELECT language, count(*) FROM web.crawl.webtable GROUP BY language")? {
        stored.insert(row[0].clone(), row[1].parse::<usize>()?);
    }
    assert_eq!(stored, expected);
    assert!(expected.len() >= 4, "{expected:?}");
    assert!(shown.contains("# Pages per language"), "{shown}");

    // The backlinks of the article shown: one anchor cell (one version)
    // per page that links to it, in its own row.
    let table = db.open_table("web", "crawl", "webtable")?;
    let article = corpus.most_linked(false);
    let key = corpus.pages[article].key();
    let expected: BTreeSet<(String, String)> = corpus.backlinks()[article]
        .iter()
        .map(|(from, text)| (corpus.pages[*from].key(), text.clone()))
        .collect();
    assert!(expected.len() >= 2, "{expected:?}");
    let anchors = widesql::Filter::all().with_families(["anchor"]);
    let row = table.read_row(key.as_bytes(), &anchors)?.ok_or("no row")?;
    let stored: BTreeSet<(String, String)> = row
        .cells
        .iter()
        .map(|c| {
            let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
            (text(&c.qualifier), text(&c.value))
        })
        .collect();
    assert_eq!(stored, expected);
    assert_eq!(row.cells.len(), expected.len());
    assert!(shown.contains(&format!("# Backlinks of {key}")), "{shown}");
    for (referrer, _) in &expected {
        assert!(
            shown.contains(&format!("| {referrer} ")),
            "{referrer} not in:\n{shown}"
        );
    }

    // Inbound links: every link is one anchor cell.
    let links: usize = corpus.pages.iter().map(|p| p.links.len()).sum();
    let total = rows("SELECT sum(cardinality(anchor)) FROM web.crawl.webtable")?;
    assert_eq!(total, vec![vec![links.to_string()]]);

    // Versions: the most linked home page changed at every crawl; GC keeps
    // three of its contents and every checksum, and its previous version
    // is the page as the crawl before found it.
    let home = corpus.most_linked(true);
    let home_key = corpus.pages[home].key();
    let versions = rows(&format!(
        "SELECT qualifier, count(*) FROM cells('web.crawl.webtable') \
         WHERE _key = '{home_key}' AND qualifier IN ('contents', 'checksum') \
         GROUP BY qualifier ORDER BY qualifier"
    ))?;
    let crawls = webtable::CRAWLS.to_string();
    assert_eq!(
        versions,
        vec![
            vec!["checksum".into(), crawls],
            vec!["contents".into(), "3".into()]
        ]
    );
    let (_, latest) = corpus.fetch(home, webtable::CRAWLS - 1);
    let (_, previous) = corpus.fetch(home, webtable::CRAWLS - 2);
    assert_ne!(latest, previous);
    let history = rows(&format!(
        "SELECT contents[1], contents[2] FROM history('web.crawl.webtable', 2) WHERE _key = '{home_key}'"
    ))?;
    assert_eq!(history, vec![vec![latest.clone(), previous]]);
    let checksum = format!("{:x}", md5::Md5::digest(latest.as_bytes()));
    let cf = widesql::Filter::all().with_families(["cf"]);
    let row = table.read_row(home_key.as_bytes(), &cf)?.ok_or("no row")?;
    assert_eq!(row.value("cf", b"checksum"), Some(checksum.as_bytes()));
    let mismatches =
        rows("SELECT count(*) FROM web.crawl.webtable WHERE md5(contents) <> checksum")?;
    assert_eq!(mismatches, vec![vec!["0".to_string()]]);

    // The export: the German sites, read back from the Parquet file.
    let german = corpus
        .pages
        .iter()
        .filter(|p| p.key().starts_with("de."))
        .count();
    assert!(german > 0);
    let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&export)?)?;
    let mut read = 0;
    for batch in reader.build()? {
        read += batch?.num_rows();
    }
    assert_eq!(read, german);
    assert!(
        shown.contains(&format!("read back: {german} rows")),
        "{shown}"
    );
    Ok(())
}

/// The text of `shown` from the line starting with `from` up to the next
/// line starting with `to`.
fn section<'a>(shown: &'a str, from: &str, to: &str) -> &'a str {
    let start = shown.find(from).unwrap_or(shown.len());
    let rest = &shown[start..];
    let end = rest[from.len()..]
        .find(to)
        .map_or(rest.len(), |i| i + from.len());
    &rest[..end]
}

#[expect(dead_code, reason = "the example's own main is not called here")]
#[path = "../examples/user_profiles.rs"]
mod user_profiles;

#[test]
fn user_profiles_sparse_attributes_event_versions_and_ttl() -> Result<(), Box<dyn std::error::Error>>
{
    use user_profiles::{Event, FIRST_TTL_DAYS, LATEST, RANGE_DAYS, SECOND_TTL_DAYS, TABLE};
    let dir = tempfile::tempdir()?;
    let db = widesql::Db::open_with(
        dir.path().join("db"),
        widesql::DbOptions::new().with_compaction_interval(None),
    )?;
    let now = widesql::wall_micros();
    let shown = user_profiles::run(&db, now)?;
    let day = 86_400_000_000_i64;

    // What the generated events say each read must return, newest first.
    let events = user_profiles::events(now);
    let of = |user: &str, keep: &dyn Fn(&Event) -> bool| -> Vec<Event> {
        let mut picked: Vec<Event> = events
            .iter()
            .filter(|e| e.user == user && keep(e))
            .cloned()
            .collect();
        picked.sort_by_key(|e| std::cmp::Reverse(e.at));
        picked
    };
    let ada_all = of("user#ada", &|_| true);
    let ada_30d = of("user#ada", &|e| now - e.at < FIRST_TTL_DAYS * day);
    // The data must exercise the TTL and the out-of-order arrival.
    assert!(
        ada_30d.len() < ada_all.len(),
        "no event of user#ada is past the TTL"
    );
    let pairs = || events.windows(2).filter(|w| w[0].user == w[1].user);
    assert!(
        pairs().any(|w| w[0].at < w[1].at) && pairs().any(|w| w[0].at > w[1].at),
        "events arrive in time order"
    );
    let line = format!(
        "user#ada: {} events written, {} returned; older than the {FIRST_TTL_DAYS}d TTL, \
         on disk (never compacted) and returned by no read: {}\n",
        ada_all.len(),
        ada_30d.len(),
        ada_all.len() - ada_30d.len()
    );
    assert!(shown.contains(&line), "'{line}' not in:\n{shown}");

    // The latest N through the embedded API, newest first.
    let latest = section(
        section(&shown, "# The latest", "The same through SQL"),
        "user#ada\n",
        "user#bo\n",
    );
    assert_eq!(latest.lines().count(), 1 + LATEST, "{latest}");
    let mut after = 0;
    for event in ada_30d.iter().take(LATEST) {
        let at = latest[after..]
            .find(&event.action)
            .ok_or_else(|| format!("'{}' not after {after} in:\n{latest}", event.action))?;
        after += at + event.action.len();
    }
    // ...and through history(): the same actions as one list.
    let list: Vec<&str> = ada_30d
        .iter()
        .take(LATEST)
        .map(|e| e.action.as_str())
        .collect();
    let list = format!("[{}]", list.join(", "));
    assert!(shown.contains(&list), "'{list}' not in:\n{shown}");

    // The time range, embedded and SQL: exactly the events in it.
    let (older, newer) = RANGE_DAYS;
    let in_range = of("user#ada", &|e| {
        e.at >= now - older * day && e.at < now - newer * day
    });
    assert!(!in_range.is_empty());
    let ranged = section(&shown, "# user#ada's events between", "\n# ");
    for event in &in_range {
        assert_eq!(
            ranged.matches(&event.action).count(),
            2,
            "'{}' not once embedded and once in SQL:\n{ranged}",
            event.action
        );
    }
    let outside: Vec<&Event> = ada_30d.iter().filter(|e| !in_range.contains(e)).collect();
    for event in outside {
        assert!(!ranged.contains(&event.action), "{event:?} in:\n{ranged}");
    }

    // The tightened TTL: every read now returns only the last week, and
    // compaction removed every older event it had kept on disk.
    let users = db.open_table("pins", "app", "users")?;
    let spec = users.spec()?;
    let gc = spec.family("events").map(|f| f.gc);
    assert_eq!(
        gc.and_then(|gc| gc.max_age_micros),
        Some(SECOND_TTL_DAYS * day)
    );
    let mut hidden = 0;
    for (user, _) in user_profiles::profiles() {
        let expected = of(user, &|e| now - e.at < SECOND_TTL_DAYS * day);
        hidden += of(user, &|_| true).len() - expected.len();
        let filter = widesql::Filter::all().with_families(["events"]);
        let got: Vec<(i64, Vec<u8>)> = users
            .read_row(user.as_bytes(), &filter)?
            .map(|row| {
                row.cells
                    .into_iter()
                    .map(|c| (c.timestamp, c.value))
                    .collect()
            })
            .unwrap_or_default();
        let want: Vec<(i64, Vec<u8>)> = expected
            .iter()
            .map(|e| (e.at, e.action.clone().into_bytes()))
            .collect();
        assert_eq!(got, want, "{user}");
    }
    assert!(hidden > 0);
    assert!(
        shown.contains(&format!("compaction then removed {hidden} event cells")),
        "not {hidden} removed in:\n{shown}"
    );
    assert_eq!(users.compact()?, 0, "hidden cells left after compaction");
    let stored = query(
        &db,
        &format!("SELECT count(*) FROM cells('{TABLE}') WHERE family = 'events'"),
    )?;
    assert_eq!(stored, [[(events.len() - hidden).to_string()]]);

    // Sparse profiles: one cell per attribute a user has, none for the rest.
    for (user, attributes) in user_profiles::profiles() {
        let filter = widesql::Filter::all().with_families(["profile"]);
        let row = users
            .read_row(user.as_bytes(), &filter)?
            .ok_or_else(|| format!("{user} has no profile"))?;
        assert_eq!(row.cells.len(), attributes.len(), "{user}");
        for (qualifier, value) in attributes {
            assert_eq!(
                row.value("profile", qualifier.as_bytes()),
                Some(value.as_bytes())
            );
        }
    }
    let websites = query(
        &db,
        &format!("SELECT _key FROM {TABLE} WHERE profile['website'] IS NOT NULL"),
    )?;
    assert_eq!(websites, [["user#cy"]]);
    Ok(())
}

#[expect(dead_code, reason = "the example's own main is not called here")]
#[path = "../examples/flights.rs"]
mod flights;

#[test]
fn flights_three_layouts_answer_alike() -> Result<(), Box<dyn std::error::Error>> {
    use flights::{FLIGHTS_PER_PLANE, PLANE, POSITIONS_PER_FLIGHT};
    let dir = tempfile::tempdir()?;
    let db = widesql::Db::open(dir.path().join("db"))?;
    let shown = flights::run(&db)?;
    let planes = flights::planes();
    let all = flights::flights();
    let (p, f, pos) = (planes.len(), all.len(), POSITIONS_PER_FLIGHT);
    assert_eq!(f, p * FLIGHTS_PER_PLANE);

    // Each layout holds the whole fleet: rows and cells as its shape says.
    for (table, rows, cells) in [
        ("tall", p + f, 2 * p + f * (3 + pos)),
        ("wide", p, 2 * p + f * (1 + pos)),
        ("flights", f, f * (4 + pos)),
    ] {
        let counted = query(
            &db,
            &format!("SELECT count(*), count(DISTINCT _key) FROM cells('fleet.ops.{table}')"),
        )?;
        assert_eq!(counted, [[cells.to_string(), rows.to_string()]], "{table}");
        let line = format!("{rows:>4} rows {cells:>5} cells");
        assert!(shown.contains(&line), "'{line}' not in:\n{shown}");
    }

    // (a) the prefix scan reads the plane row and its flights, and SQL's
    // scan reads exactly the flight rows' key range.
    let mine: Vec<&flights::Flight> = all.iter().filter(|x| x.tail == PLANE).collect();
    assert!(shown.contains(&format!(
        "prefix plane#{PLANE}: {} rows read",
        mine.len() + 1
    )));
    assert!(
        shown.contains(&format!("keys=[['plane#{PLANE}#flight#', ")),
        "no key range in:\n{shown}"
    );
    let minutes: i64 = mine.iter().map(|x| x.minutes).sum();
    assert!(
        shown.contains(&format!("| {} ", mine.len())) && shown.contains(&format!("| {minutes} "))
    );

    // (b) the single-row read and the one-day window.
    assert!(shown.contains(&format!(
        "read_row plane#{PLANE}: {} cells: 2 meta, {} flights, {} positions",
        2 + mine.len() * (1 + pos),
        mine.len(),
        mine.len() * pos
    )));
    let day = 1_714_521_600_000_000_i64 + 2 * 86_400_000_000;
    let window = section(&shown, "Its flights departing on 2024-05-03", "+--");
    let that_day: Vec<&&flights::Flight> = mine
        .iter()
        .filter(|x| x.dep >= day && x.dep < day + 86_400_000_000)
        .collect();
    assert!(!that_day.is_empty());
    assert_eq!(window.lines().count(), 1 + that_day.len(), "{window}");
    for flight in &that_day {
        assert!(
            window.contains(&format!("  {}  dep ", flight.number)),
            "{window}"
        );
    }

    // (c) the key range, and a scan of flight fields that reads no position.
    for n in 310..=314 {
        assert!(shown.contains(&format!("flight#{PLANE}#FI{n}  ")), "FI{n}");
    }
    assert!(!shown.contains(&format!("flight#{PLANE}#FI315  ")));
    let keys = section(&shown, "keys read per locality group:", "\n");
    assert!(
        keys.contains("track: 0") && !keys.contains("default: 0"),
        "{keys}"
    );

    // Per-model totals agree between the join on (a) and the denormalized
    // (c), and with the generated fleet.
    let totals = |sql: &str| query(&db, sql);
    let joined = totals(
        "SELECT p.model, count(*), sum(f.minutes) FROM fleet.ops.tall f JOIN fleet.ops.tall p \
         ON p._key = split_part(f._key, '#', 1) || '#' || split_part(f._key, '#', 2) \
         WHERE f.route IS NOT NULL GROUP BY p.model ORDER BY p.model",
    )?;
    let flat = totals(
        "SELECT model, count(*), sum(minutes) FROM fleet.ops.flights GROUP BY model ORDER BY model",
    )?;
    let mut expected: Vec<Vec<String>> = planes
        .iter()
        .map(|plane| {
            let theirs = all.iter().filter(|x| x.tail == plane.tail);
            vec![
                plane.model.to_string(),
                theirs.clone().count().to_string(),
                theirs.map(|x| x.minutes).sum::<i64>().to_string(),
            ]
        })
        .collect();
    expected.sort();
    assert_eq!(joined, expected);
    assert_eq!(flat, expected);

    // The wide row's flight cells sit at their departure times.
    let wide = db.open_table("fleet", "ops", "wide")?;
    let row = wide
        .read_row(
            format!("plane#{PLANE}").as_bytes(),
            &widesql::Filter::all().with_families(["flight"]),
        )?
        .ok_or("no plane row")?;
    for flight in &mine {
        let cell = row
            .latest("flight", flight.number.as_bytes())
            .ok_or_else(|| format!("no cell for {}", flight.number))?;
        assert_eq!(cell.timestamp, flight.dep, "{}", flight.number);
    }
    Ok(())
}
