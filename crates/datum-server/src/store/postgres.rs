//! PostgreSQL, for a fleet that outgrows one machine: every server process
//! pointed at the same database is interchangeable (the server keeps no
//! other state), so several run behind any load balancer.
//!
//! tokio-postgres with a deadpool pool. The statements of one phase of a
//! transaction are sent together (pipelined: tokio-postgres queues them on
//! the connection without waiting for each answer), each prepared once per
//! connection, so a batch of reports costs a few round trips, not one per
//! row. Migrations run under an advisory
//! lock, so two servers starting at once do not both migrate.
//!
//! Owns: [`PostgresBackend`]. Must not: hold state that another server
//! process would need to see.

use std::str::FromStr as _;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::NoTls;
use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};

use super::{Backend, Migrations, Phases, Row, Step, Stmt, StoreError, Val};

const NAME: &str = "postgres";

/// Connections per server process.
pub const POOL_SIZE: usize = 12;

/// The PostgreSQL store.
#[derive(Clone)]
pub struct PostgresBackend {
    pool: Pool,
}

impl std::fmt::Debug for PostgresBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresBackend").finish_non_exhaustive()
    }
}

fn db_error(action: &'static str) -> impl Fn(tokio_postgres::Error) -> StoreError {
    move |e| StoreError::Database {
        backend: NAME,
        action,
        detail: describe(&e),
    }
}

/// What went wrong, in the server's words when it answered (`database
/// "fleet" does not exist`), else with the reason under the client's
/// ("error connecting to server: Connection refused (os error 111)"):
/// tokio-postgres keeps the reason in its error's source, which its own
/// text leaves out.
fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return db.message().to_owned();
    }
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

fn pool_error(e: deadpool_postgres::PoolError) -> StoreError {
    StoreError::Database {
        backend: NAME,
        action: "cannot get a connection",
        detail: match &e {
            // The pool's own words ("Error occurred while creating a new
            // object: db error") hide why the connection failed.
            deadpool_postgres::PoolError::Backend(e) => describe(e),
            _ => e.to_string(),
        },
    }
}

impl PostgresBackend {
    /// Connects to `url` (`postgres://user:password@host:port/db`) and
    /// brings the schema up to date.
    pub async fn open(url: &str, migrations: Migrations) -> Result<Self, StoreError> {
        let config = tokio_postgres::Config::from_str(url).map_err(|e| StoreError::Database {
            backend: NAME,
            action: "cannot read the store URL",
            detail: e.to_string(),
        })?;
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(std::time::Duration::from_secs(10)))
            .create_timeout(Some(std::time::Duration::from_secs(10)))
            .build()
            .map_err(|e| StoreError::Database {
                backend: NAME,
                action: "cannot make the connection pool",
                detail: e.to_string(),
            })?;
        let backend = PostgresBackend { pool };
        backend.migrate(migrations).await?;
        Ok(backend)
    }

    async fn migrate(&self, migrations: Migrations) -> Result<(), StoreError> {
        let mut client = self.pool.get().await.map_err(pool_error)?;
        let tx = client
            .transaction()
            .await
            .map_err(db_error("cannot start the migration"))?;
        // "DtmF": one migration at a time across every server process.
        tx.execute("SELECT pg_advisory_xact_lock(1148479814)", &[])
            .await
            .map_err(db_error("cannot take the migration lock"))?;
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (
                 version BIGINT PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)",
        )
        .await
        .map_err(db_error("cannot create schema_migrations"))?;
        let current: i64 = tx
            .query_one(
                "SELECT coalesce(max(version), 0) FROM schema_migrations",
                &[],
            )
            .await
            .map_err(db_error("cannot read schema_migrations"))?
            .get(0);
        let known = migrations.last().map_or(0, |m| m.0);
        if current > known {
            return Err(StoreError::TooNew {
                backend: NAME,
                found: current,
                known,
            });
        }
        for (version, name, sql) in migrations.iter().filter(|m| m.0 > current) {
            tx.batch_execute(sql)
                .await
                .map_err(db_error("cannot migrate"))?;
            tx.execute(
                "INSERT INTO schema_migrations (version, name, applied_at)
                 VALUES ($1, $2, CAST(extract(epoch FROM now()) AS BIGINT))",
                &[version, name],
            )
            .await
            .map_err(db_error("cannot record the migration"))?;
        }
        tx.commit()
            .await
            .map_err(db_error("cannot commit the migration"))
    }
}

impl ToSql for Val {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self {
            Val::Int(i) => match *ty {
                Type::INT4 => i32::try_from(*i)?.to_sql(ty, out),
                Type::INT2 => i16::try_from(*i)?.to_sql(ty, out),
                Type::TEXT | Type::VARCHAR => i.to_string().to_sql(ty, out),
                _ => i.to_sql(ty, out),
            },
            Val::Text(s) => s.to_sql(ty, out),
            Val::NullInt | Val::NullText => Ok(IsNull::Yes),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

fn params(stmt: &Stmt) -> Vec<&(dyn ToSql + Sync)> {
    stmt.params
        .iter()
        .map(|v| v as &(dyn ToSql + Sync))
        .collect()
}

fn decode(row: &tokio_postgres::Row) -> Result<Row, StoreError> {
    let mut out = Vec::with_capacity(row.len());
    for (i, column) in row.columns().iter().enumerate() {
        let shape = |e: tokio_postgres::Error| StoreError::Shape {
            backend: NAME,
            detail: format!("column {}: {e}", column.name()),
        };
        let v = match *column.type_() {
            Type::INT8 => Val::opt_int(row.try_get::<_, Option<i64>>(i).map_err(shape)?),
            Type::INT4 => Val::opt_int(
                row.try_get::<_, Option<i32>>(i)
                    .map_err(shape)?
                    .map(i64::from),
            ),
            Type::INT2 => Val::opt_int(
                row.try_get::<_, Option<i16>>(i)
                    .map_err(shape)?
                    .map(i64::from),
            ),
            Type::TEXT | Type::VARCHAR | Type::NAME | Type::BPCHAR => {
                match row.try_get::<_, Option<String>>(i).map_err(shape)? {
                    Some(s) => Val::Text(s),
                    None => Val::NullText,
                }
            }
            ref other => {
                return Err(StoreError::Shape {
                    backend: NAME,
                    detail: format!("column {} has type {other}", column.name()),
                });
            }
        };
        out.push(v);
    }
    Ok(out)
}

/// Prepares (once per connection) and sends `stmts` together; the rows of
/// each, in order.
async fn pipelined(
    tx: &deadpool_postgres::Transaction<'_>,
    stmts: &[Stmt],
) -> Result<Vec<Vec<Row>>, StoreError> {
    let prepared =
        futures_util::future::try_join_all(stmts.iter().map(|s| tx.prepare_cached(&s.sql)))
            .await
            .map_err(db_error("cannot prepare"))?;
    let all = stmts.iter().zip(&prepared).map(|(s, p)| async move {
        let params = params(s);
        tx.query(p, &params).await
    });
    let answers = futures_util::future::try_join_all(all)
        .await
        .map_err(db_error("cannot run a statement"))?;
    answers
        .iter()
        .map(|rows| rows.iter().map(decode).collect::<Result<Vec<_>, _>>())
        .collect()
}

impl Backend for PostgresBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    /// Two: one batch is written while the other waits for its commit.
    fn writers(&self) -> usize {
        2
    }

    async fn phased<P: Phases>(&self, mut plan: P) -> Result<P, StoreError> {
        let mut client = self.pool.get().await.map_err(pool_error)?;
        let tx = client
            .transaction()
            .await
            .map_err(db_error("cannot start a transaction"))?;
        let mut rows = Vec::new();
        loop {
            match plan.next(rows)? {
                Step::Run(stmts) => rows = pipelined(&tx, &stmts).await?,
                Step::Commit => {
                    tx.commit().await.map_err(db_error("cannot commit"))?;
                    return Ok(plan);
                }
                Step::Rollback => {
                    tx.rollback().await.map_err(db_error("cannot roll back"))?;
                    return Ok(plan);
                }
            }
        }
    }

    async fn read(&self, stmts: Vec<Stmt>) -> Result<Vec<Vec<Row>>, StoreError> {
        let mut client = self.pool.get().await.map_err(pool_error)?;
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(db_error("cannot start a read"))?;
        let rows = pipelined(&tx, &stmts).await?;
        tx.commit().await.map_err(db_error("cannot end the read"))?;
        Ok(rows)
    }

    async fn execute(&self, stmts: Vec<Stmt>) -> Result<(), StoreError> {
        let mut client = self.pool.get().await.map_err(pool_error)?;
        let tx = client
            .transaction()
            .await
            .map_err(db_error("cannot start a transaction"))?;
        for s in &stmts {
            let p = tx
                .prepare_cached(&s.sql)
                .await
                .map_err(db_error("cannot prepare"))?;
            tx.execute(&p, &params(s))
                .await
                .map_err(db_error("cannot write"))?;
        }
        tx.commit().await.map_err(db_error("cannot commit"))
    }

    async fn rows(&self, stmt: Stmt) -> Result<Vec<Row>, StoreError> {
        let client = self.pool.get().await.map_err(pool_error)?;
        let prepared = client
            .prepare_cached(&stmt.sql)
            .await
            .map_err(db_error("cannot prepare"))?;
        let rows = client
            .query(&prepared, &params(&stmt))
            .await
            .map_err(db_error("cannot query"))?;
        rows.iter().map(decode).collect()
    }
}
