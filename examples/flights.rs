//! An aircraft fleet modelled three ways, with the queries each layout
//! answers well:
//!
//! - (a) `tall`: a plane row `plane#TF-FIR` followed by one row per flight,
//!   `plane#TF-FIR#flight#FI318`: a plane and its flights are one key range;
//! - (b) `wide`: one row per plane, a `meta` family and a `flight` family
//!   whose qualifiers are flight numbers (timestamped at departure), plus the
//!   positions in `loc`: a plane's whole history is one row read;
//! - (c) `flights`: one row per flight, `flight#TF-FIR#FI318`, with `meta`
//!   and `loc` (positions, versions of one cell) in separate locality
//!   groups: key ranges pick flights, and queries on `meta` never read the
//!   positions.
//!
//! The same generated fleet is loaded into all three; each layout's cell
//! count shows what its shape costs.
//!
//! `cargo run --release --example flights [DIR]` (a temporary directory
//! unless DIR is given).

use std::fmt::Write as _;

use widesql::StatementOutput;
use widesql::{
    ColumnSpec, Db, FamilySpec, Filter, ReadOptions, RowMutation, RowRange, RowSet, Table,
    TableSpec, ValueType,
};

const MINUTE: i64 = 60_000_000;
const DAY: i64 = 1440 * MINUTE;
/// 2024-05-01T00:00:00Z, the first day of the schedule.
const FIRST_DAY: i64 = 1_714_521_600_000_000;
/// 06:00 that day, when the first plane leaves.
const START: i64 = FIRST_DAY + 6 * 60 * MINUTE;
/// Flights per plane.
pub const FLIGHTS_PER_PLANE: usize = 30;
/// Position reports per flight.
pub const POSITIONS_PER_FLIGHT: usize = 4;
/// The plane every query looks at.
pub const PLANE: &str = "TF-FIR";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = std::env::args()
        .nth(1)
        .map_or_else(|| dir.path().join("db"), Into::into);
    let db = Db::open(&path)?;
    print!("{}", run(&db)?);
    Ok(())
}

/// A plane: registration, model, airline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plane {
    /// The registration, e.g. `TF-FIR`.
    pub tail: &'static str,
    /// The aircraft type.
    pub model: &'static str,
    /// Who flies it.
    pub airline: &'static str,
}

/// One flight of a plane.
#[derive(Debug, Clone, PartialEq)]
pub struct Flight {
    /// The plane's registration.
    pub tail: &'static str,
    /// The flight number, unique in the fleet, e.g. `FI318`.
    pub number: String,
    /// `KEF-LHR`.
    pub route: String,
    /// Departure, microseconds since 1970.
    pub dep: i64,
    /// Block time in minutes.
    pub minutes: i64,
    /// Position reports: (time in µs, `lat,lon`), oldest first.
    pub positions: Vec<(i64, String)>,
}

/// The fleet.
pub fn planes() -> Vec<Plane> {
    [
        ("TF-FIR", "Boeing 757-200"),
        ("TF-ICE", "Boeing 737 MAX 8"),
        ("TF-LLX", "Boeing 757-300"),
        ("TF-NOR", "Airbus A321LR"),
    ]
    .into_iter()
    .map(|(tail, model)| Plane {
        tail,
        model,
        airline: "Icelandair",
    })
    .collect()
}

/// Airports: code, latitude, longitude, block minutes from KEF.
const AIRPORTS: [(&str, f64, f64, i64); 6] = [
    ("LHR", 51.470, -0.454, 180),
    ("CPH", 55.618, 12.656, 190),
    ("JFK", 40.641, -73.778, 345),
    ("OSL", 60.194, 11.100, 155),
    ("BOS", 42.365, -71.010, 325),
    ("AMS", 52.310, 4.760, 185),
];
const KEF: (f64, f64) = (63.985, -22.605);

/// Every plane shuttles between Keflavik and a destination a fixed-seed
/// LCG picks, with a turnaround of 50 to 119 minutes; plane `i` flies
/// flight numbers `FI{300 + 40 i}` onwards, so that a plane's flight numbers
/// sort in time order.
pub fn flights() -> Vec<Flight> {
    let mut state: u64 = 318;
    let mut next = move |bound: usize| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        usize::try_from(state >> 33).unwrap_or(0) % bound
    };
    let mut out = Vec::new();
    for (i, plane) in planes().iter().enumerate() {
        let mut time = START + i64::try_from(i).unwrap_or(0) * 45 * MINUTE;
        let mut away = AIRPORTS[0];
        for j in 0..FLIGHTS_PER_PLANE {
            let outbound = j % 2 == 0;
            if outbound {
                away = AIRPORTS[next(AIRPORTS.len())];
            }
            let (code, lat, lon, minutes) = away;
            let ((from, a), (to, b)) = if outbound {
                (("KEF", KEF), (code, (lat, lon)))
            } else {
                ((code, (lat, lon)), ("KEF", KEF))
            };
            let positions = (0..POSITIONS_PER_FLIGHT)
                .map(|k| {
                    let share = k as f64 / (POSITIONS_PER_FLIGHT - 1) as f64;
                    let at = time
                        + minutes * MINUTE * i64::try_from(k).unwrap_or(0)
                            / i64::try_from(POSITIONS_PER_FLIGHT - 1).unwrap_or(1);
                    let lat = a.0 + (b.0 - a.0) * share;
                    let lon = a.1 + (b.1 - a.1) * share;
                    (at, format!("{lat:.3},{lon:.3}"))
                })
                .collect();
            out.push(Flight {
                tail: plane.tail,
                number: format!("FI{}", 300 + 40 * i + j),
                route: format!("{from}-{to}"),
                dep: time,
                minutes,
                positions,
            });
            time += (minutes + 50 + i64::try_from(next(70)).unwrap_or(0)) * MINUTE;
        }
    }
    out
}

/// `2024-05-01 06:00` (UTC) from microseconds.
pub fn utc(micros: i64) -> String {
    let minutes = micros.div_euclid(MINUTE);
    let (days, minute_of_day) = (minutes.div_euclid(1440), minutes.rem_euclid(1440));
    // Days since 1970 to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year}-{month:02}-{day:02} {:02}:{:02}",
        minute_of_day / 60,
        minute_of_day % 60
    )
}

/// Typed columns so that SQL shows a `route`, a `dep` TIMESTAMP and a
/// BIGINT `minutes` instead of bytes.
fn flight_columns(family: FamilySpec) -> FamilySpec {
    family
        .with_qualifier_type(None)
        .with_column(ColumnSpec::new("route", ValueType::Utf8))
        .with_column(ColumnSpec::new("dep", ValueType::Timestamp))
        .with_column(ColumnSpec::new("minutes", ValueType::Int64))
}

/// The plane's model and airline as typed columns.
fn plane_columns(family: FamilySpec) -> FamilySpec {
    family
        .with_qualifier_type(None)
        .with_column(ColumnSpec::new("model", ValueType::Utf8))
        .with_column(ColumnSpec::new("airline", ValueType::Utf8))
}

/// Route, departure and block time as the typed columns store them.
fn flight_fields(family: &str, flight: &Flight, m: RowMutation) -> RowMutation {
    m.set(family, "route", &flight.route)
        .set(family, "dep", flight.dep.to_be_bytes())
        .set(family, "minutes", flight.minutes.to_be_bytes())
}

/// Every position report as a version of `family:qualifier`, at its time.
fn positions(family: &str, qualifier: &str, flight: &Flight, m: RowMutation) -> RowMutation {
    flight
        .positions
        .iter()
        .fold(m, |m, (at, pos)| m.set_at(family, qualifier, *at, pos))
}

/// Rows and cells of a table, counted by a full read.
pub fn count(table: &Table) -> widesql::Result<(usize, usize)> {
    let (mut rows, mut cells) = (0, 0);
    for row in table.read_rows(&RowSet::all(), ReadOptions::new())? {
        rows += 1;
        cells += row?.cells.len();
    }
    Ok((rows, cells))
}

/// A BIGINT or TIMESTAMP cell: 8 big-endian bytes.
fn int(value: Option<&[u8]>) -> Option<i64> {
    value
        .and_then(|v| <[u8; 8]>::try_from(v).ok())
        .map(i64::from_be_bytes)
}

/// A flight row's fields as one line.
fn flight_line(row: &widesql::Row, family: &str) -> String {
    let dep = int(row.value(family, b"dep")).map_or_else(String::new, utc);
    let route = String::from_utf8_lossy(row.value(family, b"route").unwrap_or_default());
    let minutes = int(row.value(family, b"minutes")).unwrap_or_default();
    format!(
        "{}  {route}  dep {dep}  {minutes} min",
        String::from_utf8_lossy(&row.key)
    )
}

/// Keys each locality group of `table` has read since `before` (what
/// `keys_read_per_group` said then).
fn keys_read_since(table: &Table, before: &[(String, u64)]) -> widesql::Result<Vec<String>> {
    Ok(table
        .keys_read_per_group()?
        .into_iter()
        .map(|(group, n)| {
            let was = before
                .iter()
                .find(|(g, _)| *g == group)
                .map_or(0, |(_, n)| *n);
            format!("{group}: {}", n - was)
        })
        .collect())
}

/// Runs the tour on `db` and returns what it shows.
pub fn run(db: &Db) -> Result<String, Box<dyn std::error::Error>> {
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
    // The scan line of a plan: which key ranges and groups it reads.
    let scan_of = |query: &str| -> Result<String, Box<dyn std::error::Error>> {
        let plan = sql(&format!("EXPLAIN {query}"))?;
        Ok(plan
            .lines()
            .find_map(|line| {
                let at = line.find("WideScanExec")?;
                Some(line[at..].trim_end_matches(['|', ' ']).to_string())
            })
            .unwrap_or_default())
    };

    let planes = planes();
    let flights = flights();
    let ops = db.create_project("fleet")?.create_dataset("ops")?;
    writeln!(
        out,
        "# The fleet: {} planes, {} flights, {} position reports each",
        planes.len(),
        flights.len(),
        POSITIONS_PER_FLIGHT
    )?;

    // (a) Tall: plane rows and flight rows interleaved by key.
    let tall = ops.create_table(
        "tall",
        TableSpec::new()
            .with_family(plane_columns(FamilySpec::new("meta")))
            .with_family(flight_columns(FamilySpec::new("f")))
            .with_family(
                FamilySpec::new("loc")
                    .with_qualifier_type(None)
                    .with_column(ColumnSpec::new("pos", ValueType::Utf8)),
            ),
    )?;
    tall.bulk_mutate(
        planes
            .iter()
            .map(|p| {
                (
                    format!("plane#{}", p.tail),
                    RowMutation::new()
                        .set("meta", "model", p.model)
                        .set("meta", "airline", p.airline),
                )
            })
            .chain(flights.iter().map(|f| {
                (
                    format!("plane#{}#flight#{}", f.tail, f.number),
                    positions("loc", "pos", f, flight_fields("f", f, RowMutation::new())),
                )
            })),
    )?;

    // (b) Wide: one row per plane; one cell per flight, at its departure.
    let wide = ops.create_table(
        "wide",
        TableSpec::new()
            .with_family(plane_columns(FamilySpec::new("meta")))
            .with_family(FamilySpec::new("flight").with_qualifier_type(Some(ValueType::Utf8)))
            .with_family(FamilySpec::new("loc").with_qualifier_type(Some(ValueType::Utf8))),
    )?;
    wide.bulk_mutate(planes.iter().map(|p| {
        let m = RowMutation::new()
            .set("meta", "model", p.model)
            .set("meta", "airline", p.airline);
        let m = flights.iter().filter(|f| f.tail == p.tail).fold(m, |m, f| {
            let summary = format!("{} {}min", f.route, f.minutes);
            positions(
                "loc",
                &f.number,
                f,
                m.set_at("flight", &f.number, f.dep, summary),
            )
        });
        (format!("plane#{}", p.tail), m)
    }))?;

    // (c) Flight rows; positions in their own locality group.
    let by_flight = ops.create_table(
        "flights",
        TableSpec::new()
            .with_family(
                flight_columns(FamilySpec::new("meta"))
                    .with_column(ColumnSpec::new("model", ValueType::Utf8)),
            )
            .with_family(
                FamilySpec::new("loc")
                    .with_locality_group("track")
                    .with_qualifier_type(None)
                    .with_column(ColumnSpec::new("pos", ValueType::Utf8)),
            ),
    )?;
    by_flight.bulk_mutate(flights.iter().map(|f| {
        let model = planes
            .iter()
            .find(|p| p.tail == f.tail)
            .map_or("", |p| p.model);
        let m = flight_fields("meta", f, RowMutation::new()).set("meta", "model", model);
        (
            format!("flight#{}#{}", f.tail, f.number),
            positions("loc", "pos", f, m),
        )
    }))?;

    writeln!(out, "\n# Cells per layout")?;
    for (label, table) in [
        ("(a) tall    plane#T + plane#T#flight#N", &tall),
        ("(b) wide    plane#T", &wide),
        ("(c) flights flight#T#N", &by_flight),
    ] {
        let (rows, cells) = count(table)?;
        writeln!(out, "{label:<40} {rows:>4} rows {cells:>5} cells")?;
    }
    writeln!(
        out,
        "(a) and (c) spend a cell per field of a flight; (b) packs a flight into one cell \
         and (c) repeats the plane's model in every flight"
    )?;

    writeln!(
        out,
        "\n# (a) tall: a plane and all its flights are one key range (prefix scan)"
    )?;
    let prefix = format!("plane#{PLANE}");
    let mut scanned = 0;
    for row in tall.read_rows(&RowSet::prefix(&prefix), ReadOptions::new())? {
        let row = row?;
        scanned += 1;
        if let Some(model) = row.value("meta", b"model") {
            writeln!(
                out,
                "{}  {}",
                String::from_utf8_lossy(&row.key),
                String::from_utf8_lossy(model)
            )?;
        } else if scanned <= 4 {
            writeln!(out, "{}", flight_line(&row, "f"))?;
        }
    }
    writeln!(
        out,
        "prefix {prefix}: {scanned} rows read (the plane row and its flights), nothing else"
    )?;
    let query = format!(
        "SELECT count(*) AS flights, sum(minutes) AS minutes FROM fleet.ops.tall \
         WHERE _key LIKE 'plane#{PLANE}#flight#%'"
    );
    out.push_str(&sql(&query)?);
    writeln!(out, "{}", scan_of(&query)?)?;
    writeln!(
        out,
        "Per-model totals need the plane rows joined to the flight rows:"
    )?;
    out.push_str(&sql(
        "SELECT p.model, count(*) AS flights, sum(f.minutes) AS minutes \
         FROM fleet.ops.tall f JOIN fleet.ops.tall p \
           ON p._key = split_part(f._key, '#', 1) || '#' || split_part(f._key, '#', 2) \
         WHERE f.route IS NOT NULL GROUP BY p.model ORDER BY p.model",
    )?);

    writeln!(
        out,
        "\n# (b) wide: a plane's whole history is one row read, atomic"
    )?;
    let key = format!("plane#{PLANE}");
    if let Some(row) = wide.read_row(key.as_bytes(), &Filter::all())? {
        let count = |family: &str| row.cells.iter().filter(|c| c.family == family).count();
        writeln!(
            out,
            "read_row {key}: {} cells: {} meta, {} flights, {} positions",
            row.cells.len(),
            count("meta"),
            count("flight"),
            count("loc")
        )?;
    }
    let day = FIRST_DAY + 2 * DAY;
    writeln!(
        out,
        "Its flights departing on {} (a time-range filter on the flight family):",
        &utc(day)[..10]
    )?;
    let window = Filter::all()
        .with_families(["flight"])
        .with_time_range(day..day + DAY);
    if let Some(row) = wide.read_row(key.as_bytes(), &window)? {
        for cell in &row.cells {
            writeln!(
                out,
                "  {}  dep {}  {}",
                String::from_utf8_lossy(&cell.qualifier),
                utc(cell.timestamp),
                String::from_utf8_lossy(&cell.value)
            )?;
        }
    }
    out.push_str(&sql(
        "SELECT _key, model, cardinality(flight) AS flights FROM fleet.ops.wide ORDER BY _key",
    )?);
    out.push_str(&sql(&format!(
        "SELECT _key, flight['FI318'] AS fi318 FROM fleet.ops.wide WHERE _key = 'plane#{PLANE}'"
    ))?);
    writeln!(
        out,
        "The row grows with every flight, and every write of a plane's flights takes that one row's lock"
    )?;

    writeln!(
        out,
        "\n# (c) flights: a key range picks flights; positions are versions in their own group"
    )?;
    let (lo, hi) = (
        format!("flight#{PLANE}#FI310"),
        format!("flight#{PLANE}#FI314"),
    );
    let range = RowSet::range(RowRange::new(
        lo.clone().into_bytes()..=hi.clone().into_bytes(),
    ));
    let meta_only = ReadOptions::new().with_filter(Filter::all().with_families(["meta"]));
    for row in by_flight.read_rows(&range, meta_only)? {
        writeln!(out, "{}", flight_line(&row?, "meta"))?;
    }
    out.push_str(&sql(&format!(
        "SELECT _key, route, dep, minutes FROM fleet.ops.flights \
         WHERE _key BETWEEN '{lo}' AND '{hi}' ORDER BY _key"
    ))?);
    let track_key = format!("flight#{PLANE}#FI318");
    writeln!(out, "The track of {track_key}, oldest first:")?;
    if let Some(row) =
        by_flight.read_row(track_key.as_bytes(), &Filter::all().with_families(["loc"]))?
    {
        for cell in row.cells.iter().rev() {
            writeln!(
                out,
                "  {}  {}",
                utc(cell.timestamp),
                String::from_utf8_lossy(&cell.value)
            )?;
        }
    }
    out.push_str(&sql(&format!(
        "SELECT _key, pos FROM history('fleet.ops.flights') WHERE _key = '{track_key}'"
    ))?);
    writeln!(
        out,
        "Per-model totals without a join (the model is in every flight row), \
         reading no position:"
    )?;
    let before = by_flight.keys_read_per_group()?;
    out.push_str(&sql(
        "SELECT model, count(*) AS flights, sum(minutes) AS minutes \
         FROM fleet.ops.flights GROUP BY model ORDER BY model",
    )?);
    let keys = keys_read_since(&by_flight, &before)?;
    writeln!(out, "keys read per locality group: {}", keys.join(", "))?;

    writeln!(out, "\n# Which layout suits which query")?;
    for line in [
        "(a) tall:    everything about one plane, in order: one prefix scan; rows stay small",
        "(b) wide:    one plane's whole history or a time window of it: one atomic row read",
        "(c) flights: ranges of flights and per-flight tracks; scans of flight fields skip positions",
        "all three:   one route across planes (KEF-JFK) has no key prefix: a full scan in each",
    ] {
        writeln!(out, "{line}")?;
    }
    out.push_str(&sql(
        "SELECT count(*) AS kef_jfk FROM fleet.ops.flights WHERE route = 'KEF-JFK'",
    )?);
    Ok(out)
}
