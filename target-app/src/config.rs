//! Start-up configuration from the environment.
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `DATABASE_URL` | (required) | PostgreSQL URL, e.g. `postgres://user@127.0.0.1:5432/crm` |
//! | `JWT_SECRET` | (required) | HS256 shared secret (bytes of the UTF-8 string), non-empty |
//! | `HOST` | `127.0.0.1` | listen address (an IP) |
//! | `PORT` | `8080` | listen port |
//! | `CRM_COSTS` | `all` | the switchable costs, see [`crate::costs`] |
//! | `DB_POOL_SIZE` | `64` | maximum PostgreSQL connections (1..=10000) |
//! | `RATE_LIMIT_PER_SECOND` | `1000000` | requests per client IP per one-second window |
//! | `MAINTENANCE_FILE` | (none) | while this file exists, every request is a 503 |
//! | `RUST_LOG` | `warn` | tracing filter; there is no per-request log line |

use std::net::IpAddr;
use std::path::PathBuf;

use crate::costs::{Costs, CostsError};

/// Why the configuration was rejected; `main` prints it on one line and exits with 2.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A required variable is unset or empty.
    #[error("{0} is not set")]
    Missing(&'static str),
    /// A variable that does not parse.
    #[error("{var}={value:?} is invalid: {reason}")]
    Invalid {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// What was expected.
        reason: String,
    },
    /// `CRM_COSTS` did not parse.
    #[error(transparent)]
    Costs(#[from] CostsError),
}

/// The app's configuration (see the module docs for the variables and defaults).
#[derive(Debug, Clone)]
pub struct Config {
    /// PostgreSQL connection URL.
    pub database_url: String,
    /// HS256 secret.
    pub jwt_secret: String,
    /// Listen address.
    pub host: IpAddr,
    /// Listen port.
    pub port: u16,
    /// Costs switched on.
    pub costs: Costs,
    /// Pool size (maximum connections).
    pub db_pool_size: u32,
    /// Rate-limit ceiling, requests per client IP per second.
    pub rate_limit_per_second: u32,
    /// Maintenance-mode flag file.
    pub maintenance_file: Option<PathBuf>,
    /// The tracing filter directive (`RUST_LOG`).
    pub log_filter: String,
}

impl Config {
    /// Reads the process environment.
    ///
    /// # Errors
    /// [`ConfigError`] for a missing or unparsable variable.
    pub fn from_env() -> Result<Config, ConfigError> {
        Config::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads variables through `get` (tests pass a map).
    ///
    /// # Errors
    /// [`ConfigError`] for a missing or unparsable variable.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let required = |var: &'static str| get(var).filter(|v| !v.is_empty()).ok_or(ConfigError::Missing(var));
        fn parse<T: std::str::FromStr>(
            var: &'static str,
            raw: Option<String>,
            default: T,
            ok: impl Fn(&T) -> bool,
            reason: &str,
        ) -> Result<T, ConfigError> {
            let Some(value) = raw else { return Ok(default) };
            match value.trim().parse::<T>() {
                Ok(v) if ok(&v) => Ok(v),
                _ => Err(ConfigError::Invalid { var, value, reason: reason.to_string() }),
            }
        }
        let database_url = required("DATABASE_URL")?;
        if !(database_url.starts_with("postgres://") || database_url.starts_with("postgresql://")) {
            return Err(ConfigError::Invalid {
                var: "DATABASE_URL",
                value: database_url,
                reason: "expected a postgres:// or postgresql:// URL".into(),
            });
        }
        let jwt_secret = required("JWT_SECRET")?;
        let host = parse("HOST", get("HOST"), IpAddr::from([127, 0, 0, 1]), |_| true, "expected an IP address")?;
        let port = parse("PORT", get("PORT"), 8080u16, |_| true, "expected a port number 0..=65535")?;
        let db_pool_size =
            parse("DB_POOL_SIZE", get("DB_POOL_SIZE"), 64u32, |n| (1..=10_000).contains(n), "expected 1..=10000")?;
        let rate_limit_per_second = parse(
            "RATE_LIMIT_PER_SECOND",
            get("RATE_LIMIT_PER_SECOND"),
            1_000_000u32,
            |n| *n >= 1,
            "expected a positive integer",
        )?;
        let costs = match get("CRM_COSTS") {
            None => Costs::ALL,
            Some(v) => Costs::parse(&v)?,
        };
        let maintenance_file = get("MAINTENANCE_FILE").filter(|v| !v.is_empty()).map(PathBuf::from);
        let log_filter = get("RUST_LOG").filter(|v| !v.is_empty()).unwrap_or_else(|| "warn".to_string());
        Ok(Config {
            database_url,
            jwt_secret,
            host,
            port,
            costs,
            db_pool_size,
            rate_limit_per_second,
            maintenance_file,
            log_filter,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn cfg(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let map: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Config::from_lookup(|k| map.get(k).cloned())
    }

    const BASE: [(&str, &str); 2] = [("DATABASE_URL", "postgres://u@127.0.0.1/db"), ("JWT_SECRET", "s")];

    #[test]
    fn defaults() {
        let c = cfg(&BASE).unwrap();
        assert_eq!(c.port, 8080);
        assert_eq!(c.host.to_string(), "127.0.0.1");
        assert_eq!(c.costs, Costs::ALL);
        assert_eq!(c.db_pool_size, 64);
        assert_eq!(c.log_filter, "warn");
        assert!(c.maintenance_file.is_none());
    }

    #[test]
    fn errors() {
        assert!(matches!(cfg(&[("JWT_SECRET", "s")]), Err(ConfigError::Missing("DATABASE_URL"))));
        assert!(matches!(cfg(&BASE[..1]), Err(ConfigError::Missing("JWT_SECRET"))));
        let mut v = BASE.to_vec();
        v.push(("PORT", "70000"));
        let e = cfg(&v).unwrap_err();
        assert_eq!(e.to_string(), "PORT=\"70000\" is invalid: expected a port number 0..=65535");
        let mut v = BASE.to_vec();
        v.push(("CRM_COSTS", "all,-bogus"));
        assert!(cfg(&v).unwrap_err().to_string().contains("unknown cost `bogus`"));
        let mut v = BASE.to_vec();
        v.push(("DB_POOL_SIZE", "0"));
        assert!(matches!(cfg(&v), Err(ConfigError::Invalid { var: "DB_POOL_SIZE", .. })));
        let v = [("DATABASE_URL", "mysql://x"), ("JWT_SECRET", "s")];
        assert!(matches!(cfg(&v), Err(ConfigError::Invalid { var: "DATABASE_URL", .. })));
    }
}
