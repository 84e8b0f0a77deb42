//! The eight switchable costs of bench/SPEC.md ("The eight costs"), parsed from `CRM_COSTS`.
//!
//! Accepted forms (whitespace around entries is ignored):
//! - `all` (the default: the app "as shipped"), `none`;
//! - a comma list of names: `pool-ping,global-locks`;
//! - `all` minus some: `all,-pool-ping,-global-locks`.
//!
//! Any other form, or an unknown name, is a [`CostsError`] naming the offending entry.

use std::fmt;
use std::str::FromStr;

/// One of the eight costs. Each is a behaviour the app keeps while the switch is on; the
/// responses are identical either way, only the work per request differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cost {
    /// The pool pings PostgreSQL (a lone `Sync` answered by `ReadyForQuery`) before every
    /// checkout of an idle connection: sqlx `PgPoolOptions::test_before_acquire(true)`.
    PoolPing,
    /// Each unit-of-work transaction first runs `SELECT set_config('app.actor', $1, true)`
    /// as its own round trip.
    ActorSetConfig,
    /// The unit-of-work layer runs the rest of the pipeline in a `tokio::spawn`ed task for
    /// every request, `/json` included.
    SpawnPerRequest,
    /// Maintenance mode takes a process-wide `Mutex` and `RwLock`, and the rate limiter one
    /// global `Mutex<HashMap<IpAddr, _>>`, on every request. Off: an atomic flag refreshed at
    /// most once a second and a lock-free limiter.
    GlobalLocks,
    /// The request-context layer builds metric label `String`s, a request scope and a UUID v4
    /// request id although no metrics recorder is installed. Off: a counter-based request id.
    MetricsLabels,
    /// The current-user extractor finds the auth service by scanning every registered
    /// provider and loads every `users` column. Off: a direct field and `SELECT id, name, email`.
    WideUserLookup,
    /// JSON bodies are parsed into a `serde_json::Value` first, then into the DTO.
    DoubleJsonParse,
    /// Each insert serializes the new row to JSON for a change event nothing listens to.
    ChangeEvents,
}

impl Cost {
    /// All eight, in the order of the SPEC table.
    pub const ALL: [Cost; 8] = [
        Cost::PoolPing,
        Cost::ActorSetConfig,
        Cost::SpawnPerRequest,
        Cost::GlobalLocks,
        Cost::MetricsLabels,
        Cost::WideUserLookup,
        Cost::DoubleJsonParse,
        Cost::ChangeEvents,
    ];

    /// The switch name used in `CRM_COSTS` (kebab-case, as in the SPEC table).
    pub const fn name(self) -> &'static str {
        match self {
            Cost::PoolPing => "pool-ping",
            Cost::ActorSetConfig => "actor-set-config",
            Cost::SpawnPerRequest => "spawn-per-request",
            Cost::GlobalLocks => "global-locks",
            Cost::MetricsLabels => "metrics-labels",
            Cost::WideUserLookup => "wide-user-lookup",
            Cost::DoubleJsonParse => "double-json-parse",
            Cost::ChangeEvents => "change-events",
        }
    }

    /// The cost with this switch name, if any.
    pub fn from_name(name: &str) -> Option<Cost> {
        Cost::ALL.into_iter().find(|c| c.name() == name)
    }

    const fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

impl fmt::Display for Cost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a `CRM_COSTS` value was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CostsError {
    /// The value was empty or only separators.
    #[error("CRM_COSTS is empty: use `all`, `none`, a comma list of names or `all,-name`")]
    Empty,
    /// A name that is not one of the eight switches.
    #[error("unknown cost `{name}` in CRM_COSTS (known: {})", known_names())]
    Unknown {
        /// The entry as written, without a leading `-`.
        name: String,
    },
    /// `-name` without a leading `all`, or `all`/`none` not in first place, or mixed forms.
    #[error("bad CRM_COSTS entry `{entry}`: {reason}")]
    BadForm {
        /// The entry as written.
        entry: String,
        /// What the accepted form is.
        reason: &'static str,
    },
}

fn known_names() -> String {
    Cost::ALL.map(Cost::name).join(", ")
}

/// The set of costs switched on. `Costs::default()` is `all`, the app as shipped.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Costs(u8);

impl Costs {
    /// Every cost on (`CRM_COSTS=all`).
    pub const ALL: Costs = Costs(0xff);
    /// Every cost off (`CRM_COSTS=none`).
    pub const NONE: Costs = Costs(0);

    /// Whether `cost` is switched on.
    pub const fn on(self, cost: Cost) -> bool {
        self.0 & cost.bit() != 0
    }

    /// This set with `cost` switched off.
    pub const fn without(self, cost: Cost) -> Costs {
        Costs(self.0 & !cost.bit())
    }

    /// This set with `cost` switched on.
    pub const fn with(self, cost: Cost) -> Costs {
        Costs(self.0 | cost.bit())
    }

    /// The costs switched on, in SPEC order.
    pub fn iter(self) -> impl Iterator<Item = Cost> {
        Cost::ALL.into_iter().filter(move |c| self.on(*c))
    }

    /// Parses a `CRM_COSTS` value (see the module docs for the accepted forms).
    ///
    /// # Errors
    /// [`CostsError::Empty`], [`CostsError::Unknown`] naming the first unknown entry, or
    /// [`CostsError::BadForm`] for `-name` without `all`, or `all`/`none` mixed with names.
    pub fn parse(value: &str) -> Result<Costs, CostsError> {
        let entries: Vec<&str> = value.split(',').map(str::trim).filter(|e| !e.is_empty()).collect();
        let Some((&first, rest)) = entries.split_first() else {
            return Err(CostsError::Empty);
        };
        let lookup = |name: &str| {
            Cost::from_name(name).ok_or_else(|| CostsError::Unknown { name: name.to_string() })
        };
        match first {
            "all" => {
                let mut costs = Costs::ALL;
                for &entry in rest {
                    let Some(name) = entry.strip_prefix('-') else {
                        return Err(CostsError::BadForm {
                            entry: entry.to_string(),
                            reason: "after `all` only `-name` entries may follow",
                        });
                    };
                    costs = costs.without(lookup(name.trim())?);
                }
                Ok(costs)
            }
            "none" => match rest.first() {
                None => Ok(Costs::NONE),
                Some(entry) => Err(CostsError::BadForm {
                    entry: entry.to_string(),
                    reason: "`none` stands alone; list the costs to switch on instead",
                }),
            },
            _ => {
                let mut costs = Costs::NONE;
                for &entry in &entries {
                    if entry == "all" || entry == "none" || entry.starts_with('-') {
                        return Err(CostsError::BadForm {
                            entry: entry.to_string(),
                            reason: "`all`/`none` must come first and `-name` needs a leading `all`",
                        });
                    }
                    costs = costs.with(lookup(entry)?);
                }
                Ok(costs)
            }
        }
    }
}

impl Default for Costs {
    fn default() -> Self {
        Costs::ALL
    }
}

impl FromStr for Costs {
    type Err = CostsError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Costs::parse(s)
    }
}

/// The canonical `CRM_COSTS` spelling: `all`, `none`, or the comma list of the costs on.
impl fmt::Display for Costs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Costs::ALL => f.write_str("all"),
            Costs::NONE => f.write_str("none"),
            costs => f.write_str(&costs.iter().map(Cost::name).collect::<Vec<_>>().join(",")),
        }
    }
}

impl fmt::Debug for Costs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Costs({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_and_none() {
        assert_eq!(Costs::parse("all").unwrap(), Costs::ALL);
        assert_eq!(Costs::parse(" all ").unwrap(), Costs::ALL);
        assert_eq!(Costs::parse("none").unwrap(), Costs::NONE);
        assert_eq!(Costs::default(), Costs::ALL);
        assert_eq!(Costs::ALL.iter().count(), 8);
        assert_eq!(Costs::NONE.iter().count(), 0);
    }

    #[test]
    fn comma_list() {
        let c = Costs::parse("pool-ping, global-locks").unwrap();
        assert!(c.on(Cost::PoolPing) && c.on(Cost::GlobalLocks));
        assert_eq!(c.iter().count(), 2);
        assert_eq!(c.to_string(), "pool-ping,global-locks");
        assert_eq!(Costs::parse(&c.to_string()).unwrap(), c);
    }

    #[test]
    fn all_minus() {
        let c = Costs::parse("all,-pool-ping,-change-events").unwrap();
        assert!(!c.on(Cost::PoolPing) && !c.on(Cost::ChangeEvents));
        assert_eq!(c.iter().count(), 6);
        assert!(c.on(Cost::ActorSetConfig));
        // Every name round-trips alone and as a minus.
        for cost in Cost::ALL {
            assert_eq!(Costs::parse(cost.name()).unwrap().iter().collect::<Vec<_>>(), vec![cost]);
            let minus = Costs::parse(&format!("all,-{cost}")).unwrap();
            assert!(!minus.on(cost));
            assert_eq!(minus.iter().count(), 7);
        }
    }

    #[test]
    fn errors_name_the_entry() {
        let e = Costs::parse("pool-ping,pool-pong").unwrap_err();
        assert_eq!(e, CostsError::Unknown { name: "pool-pong".into() });
        assert!(e.to_string().contains("`pool-pong`"), "{e}");
        assert!(e.to_string().contains("change-events"), "lists known names: {e}");
        assert_eq!(Costs::parse("all,-nope").unwrap_err(), CostsError::Unknown { name: "nope".into() });
        assert_eq!(Costs::parse("").unwrap_err(), CostsError::Empty);
        assert_eq!(Costs::parse(" , ").unwrap_err(), CostsError::Empty);
        assert!(matches!(Costs::parse("-pool-ping"), Err(CostsError::BadForm { .. })));
        assert!(matches!(Costs::parse("all,pool-ping"), Err(CostsError::BadForm { .. })));
        assert!(matches!(Costs::parse("none,pool-ping"), Err(CostsError::BadForm { .. })));
        assert!(matches!(Costs::parse("pool-ping,all"), Err(CostsError::BadForm { .. })));
        assert!(matches!(Costs::parse("ALL"), Err(CostsError::Unknown { .. })));
    }
}
