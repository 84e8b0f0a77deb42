//! Change events for inserted rows, published to whoever subscribes (nobody in this app).

use serde::Serialize;
use tokio::sync::broadcast;

/// A change event: the table, the operation and the new row as JSON bytes.
#[derive(Debug, Clone)]
pub struct ChangeEvent {
    /// Table name, e.g. `deals`.
    pub table: &'static str,
    /// `insert`.
    pub op: &'static str,
    /// The row serialized with serde_json.
    pub row: bytes::Bytes,
}

/// The change-event bus (a tokio broadcast channel, capacity 1024 events).
#[derive(Debug, Clone)]
pub struct ChangeEvents {
    tx: broadcast::Sender<ChangeEvent>,
}

impl Default for ChangeEvents {
    fn default() -> Self {
        ChangeEvents { tx: broadcast::channel(1024).0 }
    }
}

impl ChangeEvents {
    /// A receiver of every later event.
    pub fn subscribe(&self) -> broadcast::Receiver<ChangeEvent> {
        self.tx.subscribe()
    }

    /// Publishes an insert of `row` into `table`. With `always_serialize` (the
    /// `change-events` cost) the row is serialized even when nobody listens; otherwise
    /// only when there is a subscriber.
    pub fn publish_insert<T: Serialize>(&self, table: &'static str, row: &T, always_serialize: bool) {
        if !always_serialize && self.tx.receiver_count() == 0 {
            return;
        }
        let Some(bytes) = serialize_change_row(row) else { return };
        // No receiver is not an error: the event is simply dropped.
        let _ = self.tx.send(ChangeEvent { table, op: "insert", row: bytes });
    }
}

/// Serializes a row for a change event. Not inlined, so that a uprobe can count it.
#[inline(never)]
fn serialize_change_row<T: Serialize>(row: &T) -> Option<bytes::Bytes> {
    match serde_json::to_vec(row) {
        Ok(v) => Some(v.into()),
        Err(e) => {
            tracing::warn!(error = %e, "change event not serialized");
            None
        }
    }
}
