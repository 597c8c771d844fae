//! The `widesql` command line: parses arguments and calls the library.

mod error;
mod export;
mod import;
mod render;
mod serve;
mod shell;
mod test_files;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use widesql::Db;

use error::CliError;
use render::{render, Format};
use test_files::TestOptions;

/// mimalloc, not glibc's allocator: sled's writes allocate and free from
/// several threads, and glibc made a bulk load about a third slower
/// (`docs/design.md`, *The allocator*, has the figures).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// An embedded SQL engine over Bigtable-style wide-column tables in sled.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    /// The database directory (created if missing).
    #[arg(long, global = true)]
    db: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs SQL statements in order and prints each result.
    Sql {
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
        /// The statements, separated by ';'.
        statements: String,
    },
    /// An interactive SQL shell.
    Shell {
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// Runs sqllogictest files (.slt, .test) and directories, each file in a
    /// new temporary database unless --db is given.
    Test {
        /// Rewrite the expected results with widesql's output.
        #[arg(long)]
        complete: bool,
        /// Run on plain in-memory DataFusion instead (the baseline).
        #[arg(long)]
        memory: bool,
        /// Do not check column types (for files written for other engines).
        #[arg(long)]
        loose_types: bool,
        /// Files or directories.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
    },
    /// Writes a query's result to a file, or to stdout for piping (an
    /// Arrow IPC stream unless --format says otherwise).
    Export {
        /// parquet, arrow (IPC file), arrows (IPC stream), csv, json or
        /// ndjson; default: from the output's extension, else parquet.
        #[arg(long)]
        format: Option<String>,
        /// The file to write, or '-' for stdout (the default).
        #[arg(long)]
        output: Option<PathBuf>,
        /// Write Utf8/Binary instead of Utf8View/BinaryView, for readers
        /// that do not know the view types.
        #[arg(long)]
        plain_types: bool,
        /// No progress bar and no summary.
        #[arg(long)]
        quiet: bool,
        /// The query.
        query: String,
    },
    /// Imports Parquet, Arrow IPC, CSV or JSON (newline-delimited, or one
    /// array of objects) files into a table, columns matched by name. Each file is written in
    /// atomic batches; a new table (--create) appears only when its file is
    /// in.
    Import {
        /// The table: table, dataset.table or project.dataset.table.
        #[arg(long)]
        table: String,
        /// parquet, arrow, arrows, csv, json or ndjson; default: from each
        /// file's extension.
        #[arg(long)]
        format: Option<String>,
        /// Create the table from the first file's columns (a column named
        /// _key becomes the row key).
        #[arg(long)]
        create: bool,
        /// No progress bar and no summary.
        #[arg(long)]
        quiet: bool,
        /// Files, or directories of files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Lists projects, datasets, tables and their column families.
    Catalog,
    /// Serves the database over Arrow Flight SQL (gRPC) until SIGINT or
    /// SIGTERM; prints `listening on ADDR` once it takes calls.
    #[command(group(clap::ArgGroup::new("role").args(["master", "worker"])))]
    Serve {
        /// The address to listen on (port 0: any free port).
        #[arg(long, default_value = "127.0.0.1:50051")]
        listen: std::net::SocketAddr,
        /// A PEM certificate chain: serve TLS (with --tls-key).
        #[arg(long, requires = "tls_key")]
        tls_cert: Option<PathBuf>,
        /// The PEM private key of --tls-cert.
        #[arg(long, requires = "tls_cert")]
        tls_key: Option<PathBuf>,
        /// The PEM certificates a cluster's master or worker that serves
        /// TLS trusts in the other processes' answers (such as the CA that
        /// signed their certificates); every call between them then goes
        /// over TLS.
        #[arg(long, requires_all = ["tls_cert", "role"], value_name = "FILE")]
        tls_ca: Option<PathBuf>,
        /// Listen on an address that is not a loopback one without TLS, or
        /// while the database has no users (anyone who reaches it can read
        /// and write every table).
        #[arg(long)]
        insecure: bool,
        /// Create this admin user first; its password is read from the
        /// WIDESQL_ADMIN_PASSWORD environment variable, or else from the
        /// first line of standard input. Once a user exists, every client
        /// signs in.
        #[arg(long, value_name = "USER")]
        init_admin: Option<String>,
        /// Stop a query that runs longer than this many seconds.
        #[arg(long, value_name = "SECONDS", default_value_t = 3600)]
        query_timeout: u64,
        /// The memory each session's queries may hold at once, in MiB.
        #[arg(long, value_name = "MIB", default_value_t = 1024)]
        session_memory: usize,
        /// The longest statement text a client may send, in KiB.
        #[arg(long, value_name = "KIB", default_value_t = 1024)]
        max_statement_kib: usize,
        /// Connections open at once.
        #[arg(long, value_name = "N", default_value_t = 4096)]
        max_connections: usize,
        /// Statements running at once.
        #[arg(long, value_name = "N", default_value_t = 256)]
        max_statements: usize,
        /// Statements of one user running at once.
        #[arg(long, value_name = "N", default_value_t = 128)]
        max_user_statements: usize,
        /// Sessions one user may have open at once.
        #[arg(long, value_name = "N", default_value_t = 512)]
        max_user_sessions: usize,
        /// Serve as a cluster's master: workers join it. The cluster's
        /// processes share a secret, read from the WIDESQL_CLUSTER_SECRET
        /// environment variable.
        #[arg(long, conflicts_with = "worker")]
        master: bool,
        /// Serve as a worker of the master given by --join, with this
        /// database directory as the worker's own.
        #[arg(long, requires = "join", conflicts_with = "init_admin")]
        worker: bool,
        /// The master a worker joins (host:port).
        #[arg(long, value_name = "MASTER_ADDR", requires = "worker")]
        join: Option<String>,
        /// The host name or address the other processes of the cluster
        /// reach this master or worker at, on the port it listens on
        /// (needed with an unspecified --listen address such as 0.0.0.0).
        #[arg(long, value_name = "HOST", requires = "role")]
        advertise: Option<String>,
    },
}

/// The database directory when none is given.
const DEFAULT_DB: &str = "widesql-data";

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The command runs on a thread with the runtime's stack size: a
    // runtime's `block_on` runs its statement on the calling thread.
    let command = std::thread::Builder::new()
        .name("widesql".into())
        .stack_size(THREAD_STACK_BYTES)
        .spawn(move || run(cli));
    match command.map(std::thread::JoinHandle::join) {
        Ok(Ok(code)) => code,
        Ok(Err(_)) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: cannot start the command's thread: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> ExitCode {
    let result = match cli.command {
        Command::Test {
            complete,
            memory,
            loose_types,
            paths,
        } => {
            let options = TestOptions {
                db: cli.db,
                complete,
                memory,
                loose_types,
            };
            test_files::run(&paths, &options)
        }
        command => {
            let db_dir = cli.db.unwrap_or_else(|| PathBuf::from(DEFAULT_DB));
            Db::open(&db_dir)
                .map_err(CliError::from)
                .and_then(|db| run_on(&db, command))
                .map(|()| true)
        }
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs a command that works on one database.
fn run_on(db: &Db, command: Command) -> Result<(), CliError> {
    match command {
        Command::Sql { format, statements } => run_sql(db, &statements, format),
        Command::Shell { format } => runtime()?.block_on(shell::run(&db.session(), format)),
        Command::Export {
            format,
            output,
            plain_types,
            quiet,
            query,
        } => export::run(
            db,
            export::ExportArgs {
                query,
                output,
                format,
                plain_types,
                quiet,
            },
        ),
        Command::Import {
            table,
            format,
            create,
            quiet,
            files,
        } => import::run(
            db,
            import::ImportArgs {
                table,
                files,
                format,
                create,
                quiet,
            },
        ),
        Command::Catalog => print_catalog(db),
        Command::Serve {
            listen,
            tls_cert,
            tls_key,
            tls_ca,
            insecure,
            init_admin,
            query_timeout,
            session_memory,
            max_statement_kib,
            max_connections,
            max_statements,
            max_user_statements,
            max_user_sessions,
            master,
            worker: _,
            join,
            advertise,
        } => serve::run(
            db,
            serve::ServeArgs {
                listen,
                tls_cert,
                tls_key,
                tls_ca,
                insecure,
                init_admin,
                role: match join {
                    Some(master) => serve::Role::Worker { master },
                    None if master => serve::Role::Master,
                    None => serve::Role::Single,
                },
                advertise,
                limits: widesql_server::Limits {
                    query_time: std::time::Duration::from_secs(query_timeout),
                    session_memory: session_memory.saturating_mul(1 << 20),
                    statement_bytes: max_statement_kib.saturating_mul(1 << 10),
                    connections: max_connections,
                    running_statements: max_statements,
                    running_statements_per_user: max_user_statements,
                    sessions_per_user: max_user_sessions,
                    ..widesql_server::Limits::default()
                },
            },
        ),
        Command::Test { .. } => Ok(()),
    }
}

/// Stack of each runtime thread. Parsing, planning and dropping a
/// statement recurse once per level of its expressions (DataFusion is built
/// without its stack-growing `recursive_protection`): with the 2 MiB
/// default, a `SELECT 1+1+…` of a few hundred terms overflowed a debug
/// build's stack and aborted the process, a server included. Only the
/// pages a thread touches take memory.
const THREAD_STACK_BYTES: usize = 64 << 20;

fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(THREAD_STACK_BYTES)
        .build()
        .map_err(CliError::Runtime)
}

/// Runs the statements in order and prints each result that has columns
/// as soon as its statement has run: a statement that fails later does not
/// hide what the earlier ones did (and committed).
fn run_sql(db: &Db, statements: &str, format: Format) -> Result<(), CliError> {
    use std::io::Write;
    let session = db.session();
    runtime()?.block_on(async {
        let mut out = std::io::stdout().lock();
        let mut failed: Option<CliError> = None;
        // The reader went away (`| head`): what it did not read is not
        // wanted, as for psql.
        let mut closed = false;
        let ran = session
            .run_each(statements, |output| {
                if closed || failed.is_some() || output.schema.fields().is_empty() {
                    return;
                }
                let written = render(&output.schema, &output.batches, format).and_then(|text| {
                    let newline = if text.ends_with('\n') { "" } else { "\n" };
                    write!(out, "{text}{newline}")
                        .and_then(|()| out.flush())
                        .map_err(CliError::Output)
                });
                match written {
                    Err(CliError::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                        closed = true
                    }
                    Err(e) => failed = Some(e),
                    Ok(()) => {}
                }
            })
            .await;
        // A statement's error comes first; a result that could not be
        // shown is said as well, not hidden behind it.
        match (ran, failed) {
            (Err(e), Some(shown)) => {
                eprintln!("error: {shown}");
                Err(e.into())
            }
            (Err(e), None) => Err(e.into()),
            (Ok(_), Some(shown)) => Err(shown),
            (Ok(_), None) => Ok(()),
        }
    })
}

fn print_catalog(db: &Db) -> Result<(), CliError> {
    for project in db.projects()? {
        for dataset in project.datasets()? {
            for table in dataset.tables()? {
                let spec = table.spec()?;
                let families: Vec<String> = spec
                    .families
                    .iter()
                    .map(|f| format!("{} [{}]", f.name, f.locality_group))
                    .collect();
                println!("{}  {}", table.qualified_name()?, families.join(", "));
            }
        }
    }
    Ok(())
}
