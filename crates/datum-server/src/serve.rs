//! Running the server: the store chosen by `server.yaml` (or `--store`),
//! TLS with rustls from the folder's certificate, HTTP/1.1 with hyper, the
//! API of [`crate::api`]; and the commands `init`, `enroll` and `serve`
//! as the `datum` binary calls them (each starts its own tokio runtime:
//! nothing async leaks into the binary).
//!
//! Bounds: a TLS handshake must finish within 10 s and a request's headers
//! arrive within 10 s; the whole request is bounded by
//! `limits.request_timeout`, the body by `limits.report_bytes`. A failed
//! `accept` (no descriptor left) is tried again after a pause, not at once.
//! SIGTERM/SIGINT stop accepting and let requests in flight finish.
//!
//! Owns: [`serve`], [`init_command`], [`enroll_command`], [`remove_command`],
//! [`rotate_admin_command`], [`AnyFleet`].
//! Must not: keep state outside the store.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use datum_fleet::IdentityKind;
use datum_fleet::credentials::Credentials;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;

use crate::api::App;
use crate::config::{self, ServerConfig};
use crate::fleet::Fleet;
use crate::init::{self, InitError, InitOptions, Initialised, ServerDir};
use crate::store::postgres::PostgresBackend;
use crate::store::sqlite::SqliteBackend;
use crate::store::{MIGRATIONS, StoreError};

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the retention of daily aggregates and idempotency keys runs
/// (and once when the server starts).
const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// Why the server could not run.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Init(#[from] InitError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: {message}", path.display())]
    Tls {
        path: std::path::PathBuf,
        message: String,
    },
    #[error("cannot start the runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

/// A fleet over whichever store the configuration names.
pub enum AnyFleet {
    Sqlite(Fleet<SqliteBackend>),
    Postgres(Fleet<PostgresBackend>),
}

/// Opens the store `store` (`sqlite`: `DIR/fleet.db`; else a PostgreSQL
/// URL), migrates it, and fills in what a migration could not (see
/// [`Fleet::backfill`]).
pub async fn open_store(dir: &Path, store: &str) -> Result<AnyFleet, StoreError> {
    let fleet = open_migrated(dir, store).await?;
    match &fleet {
        AnyFleet::Sqlite(f) => f.backfill().await?,
        AnyFleet::Postgres(f) => f.backfill().await?,
    };
    Ok(fleet)
}

async fn open_migrated(dir: &Path, store: &str) -> Result<AnyFleet, StoreError> {
    if store == "sqlite" {
        let path = dir.join(config::SQLITE_FILE);
        let backend = tokio::task::block_in_place(|| {
            // Created 0600 before SQLite makes it 0644, never through a link.
            if let Ok(Some(folder)) = datum_host::PrivateDir::open_path(dir, false) {
                let _ = folder.open_or_create(config::SQLITE_FILE, 0o600);
            }
            SqliteBackend::open(&path, MIGRATIONS::SQLITE)
        })?;
        Ok(AnyFleet::Sqlite(Fleet::new(backend)))
    } else {
        Ok(AnyFleet::Postgres(Fleet::new(
            PostgresBackend::open(store, MIGRATIONS::POSTGRES).await?,
        )))
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, ServeError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(ServeError::Runtime)
}

/// `datum server init`: the folder, then the admin token's hash in the store.
pub fn init_command(dir: &Path, opts: &InitOptions) -> Result<Initialised, ServeError> {
    // A listen address hosts cannot report to is refused before anything
    // is reached or written.
    init::report_url(opts)?;
    let runtime = runtime()?;
    // A PostgreSQL store is reached (and migrated) before anything is
    // written: else a store that cannot be reached (down, a mistyped URL)
    // left a folder whose admin credential no store knew, which `init`
    // then refused to write over ("a file is in the way").
    if opts.store != "sqlite" {
        runtime.block_on(open_store(dir, &opts.store))?;
    }
    let made = init::init(dir, opts)?;
    let hash = init::admin_token_hash(&made.admin);
    runtime.block_on(async {
        match open_store(dir, &made.dir.config.store).await? {
            AnyFleet::Sqlite(f) => f.add_admin(&hash, unix_now()).await,
            AnyFleet::Postgres(f) => f.add_admin(&hash, unix_now()).await,
        }
    })?;
    Ok(made)
}

/// `datum server enroll`: a token for `name` (its hash in the store), and
/// the credentials to write to the host.
pub fn enroll_command(
    dir: &Path,
    name: &str,
    kind: IdentityKind,
    store: Option<&str>,
) -> Result<Credentials, ServeError> {
    let server = ServerDir::open(dir)?;
    let (credentials, hash) = init::credentials_for(&server, name, kind)?;
    let store = store.unwrap_or(&server.config.store).to_owned();
    runtime()?.block_on(async {
        match open_store(dir, &store).await? {
            AnyFleet::Sqlite(f) => f.enroll(name, kind.word(), &hash, unix_now()).await,
            AnyFleet::Postgres(f) => f.enroll(name, kind.word(), &hash, unix_now()).await,
        }
    })?;
    Ok(credentials)
}

/// `datum server rotate-admin`: a new admin credential, recorded in the
/// store as the only one (every other admin token and every web session
/// ends), then written to `DIR/admin.yaml`. Should writing the file fail,
/// running it again issues another.
pub fn rotate_admin_command(dir: &Path, store: Option<&str>) -> Result<PathBuf, ServeError> {
    let server = ServerDir::open(dir)?;
    let admin = init::new_admin(&server)?;
    let hash = init::admin_token_hash(&admin);
    let store = store.unwrap_or(&server.config.store).to_owned();
    runtime()?.block_on(async {
        match open_store(dir, &store).await? {
            AnyFleet::Sqlite(f) => f.replace_admins(&hash, unix_now()).await,
            AnyFleet::Postgres(f) => f.replace_admins(&hash, unix_now()).await,
        }
    })?;
    init::write_admin(&server, &admin)?;
    Ok(server.path(config::ADMIN_FILE))
}

/// `datum server remove`: takes host or stack `name` out of the fleet (its
/// token ends, what it reported goes; see [`Fleet::remove`]). `false` when
/// no host or stack has that name.
pub fn remove_command(dir: &Path, name: &str, store: Option<&str>) -> Result<bool, ServeError> {
    let server = ServerDir::open(dir)?;
    let store = store.unwrap_or(&server.config.store).to_owned();
    Ok(runtime()?.block_on(async {
        match open_store(dir, &store).await? {
            AnyFleet::Sqlite(f) => f.remove(name, unix_now()).await,
            AnyFleet::Postgres(f) => f.remove(name, unix_now()).await,
        }
    })?)
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// The rustls configuration from the folder's certificate and key.
fn tls_config(dir: &ServerDir) -> Result<rustls::ServerConfig, ServeError> {
    let cert_path = dir.path(config::CERT_FILE);
    let key_path = dir.path(config::KEY_FILE);
    let tls = |path: &Path, message: String| ServeError::Tls {
        path: path.to_owned(),
        message,
    };
    let cert_pem = dir.read(config::CERT_FILE)?;
    let key_pem = dir.read(config::KEY_FILE)?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| tls(&cert_path, e.to_string()))?;
    if certs.is_empty() {
        return Err(tls(&cert_path, "no certificate in it".to_owned()));
    }
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| tls(&key_path, e.to_string()))?;
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| tls(&cert_path, e.to_string()))?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(|e| tls(&key_path, e.to_string()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// What `serve` was asked for.
#[derive(Debug, Clone, Default)]
pub struct ServeOptions {
    pub listen: Option<String>,
    pub store: Option<String>,
}

/// `datum server serve`: runs until SIGTERM or SIGINT. `ready` is called
/// with the bound address once the server accepts connections.
pub fn serve(
    dir: &Path,
    opts: &ServeOptions,
    ready: impl FnOnce(SocketAddr, &ServerConfig, &str),
) -> Result<(), ServeError> {
    let mut server = ServerDir::open(dir)?;
    if let Some(store) = &opts.store {
        server.config.store = store.clone();
    }
    let listen = opts
        .listen
        .clone()
        .unwrap_or_else(|| server.config.listen.clone());
    let tls = Arc::new(tls_config(&server)?);
    // One descriptor per connection: the soft limit a service starts with
    // (1,024 under systemd) would let a thousand idle connections, which
    // anyone who reaches the port can hold, keep every host out.
    datum_host::descriptors::take_hard_open_files_limit();
    runtime()?.block_on(async move {
        let listener = TcpListener::bind(&listen)
            .await
            .map_err(|source| ServeError::Listen {
                addr: listen.clone(),
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| ServeError::Listen {
            addr: listen.clone(),
            source,
        })?;
        let config = server.config.clone();
        let shutdown = async {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {},
                _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {},
            }
        };
        match open_store(&server.dir, &config.store).await? {
            AnyFleet::Sqlite(f) => {
                let app = Arc::new(App::new(f, config.clone()));
                ready(addr, &config, "sqlite");
                accept_loop(listener, tls, app, shutdown).await;
            }
            AnyFleet::Postgres(f) => {
                let app = Arc::new(App::new(f, config.clone()));
                ready(addr, &config, "postgres");
                accept_loop(listener, tls, app, shutdown).await;
            }
        }
        Ok(())
    })
}

/// Accepts connections until `shutdown` resolves; then waits (at most the
/// request timeout) for the requests in flight.
pub async fn accept_loop<B: crate::store::Backend>(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    app: Arc<App<B>>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let grace = app.config.limits.request_timeout;
    let router = crate::api::router(Arc::clone(&app));
    let tasks = tokio_util_tracker();
    // `retention.daily_days`: daily aggregates and deep checks older than
    // that go, and the keys of reports no longer kept, now and every hour
    // (every server process does it; the deletes are the same on each).
    let pruner = {
        let app = Arc::clone(&app);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(PRUNE_EVERY);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                let days = app.config.retention.daily_days;
                if let Err(e) = app.fleet.prune(app.now(), days).await {
                    eprintln!("warning: cannot remove what is older than {days} days: {e}");
                }
            }
        })
    };
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = accept(&listener) => {
                let Some((tcp, peer)) = accepted else { continue };
                let _ = tcp.set_nodelay(true);
                let acceptor = acceptor.clone();
                // Every request knows its client's address (the web view
                // records it with what a person does).
                let router = tower::ServiceExt::map_request(
                    router.clone(),
                    move |mut req: axum::http::Request<hyper::body::Incoming>| {
                        req.extensions_mut().insert(crate::web::Peer(peer));
                        req
                    },
                );
                tasks.spawn(async move {
                    let Ok(Ok(stream)) = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await else {
                        return;
                    };
                    let service = TowerToHyperService::new(router);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .timer(TokioTimer::new())
                        .header_read_timeout(HEADER_TIMEOUT)
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
            () = &mut shutdown => break,
        }
    }
    pruner.abort();
    tasks.close();
    let _ = tokio::time::timeout(grace, tasks.wait()).await;
}

/// How long the accept loop waits after `accept` failed for want of a
/// resource (no descriptor left: EMFILE, ENFILE; no memory).
const ACCEPT_PAUSE: Duration = Duration::from_millis(250);

/// The next connection; `None` when `accept` failed. A connection that was
/// reset before it was taken is simply skipped; any other failure (the
/// process or the system out of descriptors, out of memory) leaves the
/// listener readable, so taking the next one at once would fail the same
/// way in a loop at full CPU until a descriptor is freed (seen: 2 s of CPU
/// in 3 with the descriptors held by idle connections, which anyone who
/// reaches the port can open). It waits [`ACCEPT_PAUSE`] instead, and says
/// so on stderr.
async fn accept(listener: &TcpListener) -> Option<(tokio::net::TcpStream, SocketAddr)> {
    match listener.accept().await {
        Ok(accepted) => Some(accepted),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionRefused
                    | std::io::ErrorKind::Interrupted
            ) =>
        {
            None
        }
        Err(e) => {
            eprintln!(
                "warning: cannot accept a connection ({e}); trying again in {} ms",
                ACCEPT_PAUSE.as_millis()
            );
            tokio::time::sleep(ACCEPT_PAUSE).await;
            None
        }
    }
}

/// The connections in flight (to wait for them at shutdown).
fn tokio_util_tracker() -> Tracker {
    Tracker::default()
}

/// A count of running tasks that can be waited on.
#[derive(Clone, Default)]
struct Tracker {
    inner: Arc<(std::sync::atomic::AtomicUsize, tokio::sync::Notify)>,
}

impl Tracker {
    fn spawn(&self, f: impl std::future::Future<Output = ()> + Send + 'static) {
        let inner = Arc::clone(&self.inner);
        inner.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        tokio::spawn(async move {
            f.await;
            if inner.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst) == 1 {
                inner.1.notify_waiters();
            }
        });
    }

    fn close(&self) {}

    async fn wait(&self) {
        loop {
            let notified = self.inner.1.notified();
            if self.inner.0.load(std::sync::atomic::Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }
}
