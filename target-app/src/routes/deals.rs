//! `/api/deals`: the authenticated, paginated list and the validated insert.

use std::collections::HashMap;
use std::fmt;

use axum::extract::{Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::Json;
use chrono::{DateTime, Utc};
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

use super::query_param;
use crate::costs::Cost;
use crate::db::deals::{self, DealRow};
use crate::db::users::{self, UserSummary};
use crate::error::{AppError, FieldErrors};
use crate::extract::json::Validate;
use crate::extract::{CurrentUser, ValidJson};
use crate::layers::unit_of_work::Uow;
use crate::state::AppState;

/// The six stages, in pipeline order.
pub const STAGES: [&str; 6] = ["lead", "qualified", "proposal", "negotiation", "won", "lost"];
/// Longest title, in Unicode scalar values.
pub const MAX_TITLE_CHARS: usize = 200;
/// Largest amount, in cents (10^12).
pub const MAX_AMOUNT_CENTS: i64 = 1_000_000_000_000;
/// The message of every `amount_cents` rule break but a missing value.
const AMOUNT_RULE: &str = "must be an integer from 0 to 1000000000000";
/// Default `per_page`.
pub const DEFAULT_PER_PAGE: i64 = 20;
/// Largest `per_page`.
pub const MAX_PER_PAGE: i64 = 100;

/// A deal as the API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Deal {
    /// Id.
    pub id: i64,
    /// Title.
    pub title: String,
    /// Amount in cents.
    pub amount_cents: i64,
    /// Stage.
    pub stage: String,
    /// Creation time, RFC 3339 UTC.
    pub created_at: DateTime<Utc>,
    /// The owner.
    pub owner: UserSummary,
}

impl Deal {
    fn new(row: DealRow, owner: UserSummary) -> Deal {
        Deal { id: row.id, title: row.title, amount_cents: row.amount_cents, stage: row.stage, created_at: row.created_at, owner }
    }
}

/// `meta` of a page.
#[derive(Debug, Serialize)]
pub struct PageMeta {
    /// 1-based page number.
    pub page: i64,
    /// Page size.
    pub per_page: i64,
    /// Number of deals.
    pub total: i64,
    /// `ceil(total / per_page)`.
    pub total_pages: i64,
}

/// `{"data":[Deal...],"meta":{...}}`.
#[derive(Debug, Serialize)]
pub struct Page {
    /// The deals of the page, newest first.
    pub data: Vec<Deal>,
    /// Paging figures.
    pub meta: PageMeta,
}

fn int_param(raw: Option<&str>, default: i64, min: i64, max: i64, message: &str, name: &str, errors: &mut FieldErrors) -> i64 {
    let Some(raw) = raw else { return default };
    match raw.trim().parse::<i64>() {
        Ok(n) if (min..=max).contains(&n) => n,
        _ => {
            errors.entry(name.to_string()).or_default().push(message.to_string());
            default
        }
    }
}

/// `GET /api/deals?page=P&per_page=S`: count, page, owners, in the request's transaction.
pub async fn deals_list(
    uow: Uow,
    CurrentUser(_user): CurrentUser,
    Query(params): Query<Vec<(String, String)>>,
) -> Result<Json<Page>, AppError> {
    let mut errors = FieldErrors::new();
    let page = int_param(query_param(&params, "page"), 1, 1, i64::MAX, "must be an integer of at least 1", "page", &mut errors);
    let per_page = int_param(
        query_param(&params, "per_page"),
        DEFAULT_PER_PAGE,
        1,
        MAX_PER_PAGE,
        "must be an integer from 1 to 100",
        "per_page",
        &mut errors,
    );
    if !errors.is_empty() {
        return Err(AppError::Validation(errors));
    }
    let mut conn = uow.conn().await?;
    let total = deals::count(&mut conn).await?;
    let offset = (page - 1).saturating_mul(per_page);
    let rows = deals::page(&mut conn, per_page, offset).await?;
    let data = if rows.is_empty() {
        Vec::new()
    } else {
        let mut ids: Vec<i64> = rows.iter().map(|r| r.owner_id).collect();
        ids.sort_unstable();
        ids.dedup();
        let owners: HashMap<i64, UserSummary> =
            users::find_summaries(&mut conn, &ids).await?.into_iter().map(|u| (u.id, u)).collect();
        rows.into_iter()
            .map(|row| {
                let owner = owners
                    .get(&row.owner_id)
                    .cloned()
                    .ok_or_else(|| AppError::Internal(format!("deal {} has no owner row", row.id)))?;
                Ok(Deal::new(row, owner))
            })
            .collect::<Result<Vec<_>, AppError>>()?
    };
    let total_pages = if total == 0 { 0 } else { (total + per_page - 1) / per_page };
    Ok(Json(Page { data, meta: PageMeta { page, per_page, total, total_pages } }))
}

/// `POST /api/deals`: validated insert in the request's transaction, 201 + `Location`.
pub async fn deals_create(
    State(state): State<AppState>,
    uow: Uow,
    CurrentUser(user): CurrentUser,
    ValidJson(input): ValidJson<CreateDealInput>,
) -> Result<(StatusCode, [(header::HeaderName, HeaderValue); 1], Json<Deal>), AppError> {
    let row = {
        let mut conn = uow.conn().await?;
        deals::insert(&mut conn, user.id, &input.title, input.amount_cents, input.stage).await?
    };
    let deal = Deal::new(row, user);
    state.events.publish_insert("deals", &deal, state.costs.on(Cost::ChangeEvents));
    let location = HeaderValue::from_str(&format!("/api/deals/{}", deal.id))
        .map_err(|e| AppError::Internal(format!("location header: {e}")))?;
    Ok((StatusCode::CREATED, [(header::LOCATION, location)], Json(deal)))
}

/// A validated `POST /api/deals` body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateDeal {
    /// 1..=200 characters.
    pub title: String,
    /// 0..=10^12.
    pub amount_cents: i64,
    /// One of [`STAGES`].
    pub stage: &'static str,
}

/// One field of a body as found: missing, `null`, of the wrong JSON type, or a value.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Slot<T> {
    /// Not in the object.
    #[default]
    Missing,
    /// `null`.
    Null,
    /// Another JSON type than expected.
    WrongType,
    /// A value of the expected type.
    Value(T),
}

/// The raw `POST /api/deals` body: `{"title","amount_cents","stage"}`, unknown fields
/// recorded (and rejected by validation). Its `Deserialize` never fails on a field's type,
/// so that direct and `Value`-first parsing give the same answers.
#[derive(Debug, Default)]
pub struct CreateDealInput {
    title: Slot<String>,
    amount_cents: Slot<i128>,
    stage: Slot<String>,
    unknown: Vec<String>,
}

struct StrSlot(Slot<String>);
struct IntSlot(Slot<i128>);

fn drain_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element::<IgnoredAny>()?.is_some() {}
    Ok(())
}

fn drain_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<(), A::Error> {
    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
    Ok(())
}

macro_rules! wrong_type_visits {
    ($slot:ident) => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> { Ok($slot(Slot::WrongType)) }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> { Ok($slot(Slot::WrongType)) }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> { Ok($slot(Slot::Null)) }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> { Ok($slot(Slot::Null)) }
        fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> { drain_seq(seq)?; Ok($slot(Slot::WrongType)) }
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> { drain_map(map)?; Ok($slot(Slot::WrongType)) }
    };
}

impl<'de> Deserialize<'de> for StrSlot {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = StrSlot;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { f.write_str("any JSON value") }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<StrSlot, E> { Ok(StrSlot(Slot::Value(v.to_string()))) }
            fn visit_string<E: de::Error>(self, v: String) -> Result<StrSlot, E> { Ok(StrSlot(Slot::Value(v))) }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<StrSlot, E> { Ok(StrSlot(Slot::WrongType)) }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<StrSlot, E> { Ok(StrSlot(Slot::WrongType)) }
            wrong_type_visits!(StrSlot);
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for IntSlot {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = IntSlot;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { f.write_str("any JSON value") }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<IntSlot, E> { Ok(IntSlot(Slot::Value(v.into()))) }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<IntSlot, E> { Ok(IntSlot(Slot::Value(v.into()))) }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<IntSlot, E> { Ok(IntSlot(Slot::WrongType)) }
            wrong_type_visits!(IntSlot);
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for CreateDealInput {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = CreateDealInput;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { f.write_str("a JSON object") }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<CreateDealInput, A::Error> {
                let mut input = CreateDealInput::default();
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "title" => input.title = map.next_value::<StrSlot>()?.0,
                        "amount_cents" => input.amount_cents = map.next_value::<IntSlot>()?.0,
                        "stage" => input.stage = map.next_value::<StrSlot>()?.0,
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                            if !input.unknown.contains(&key) {
                                input.unknown.push(key);
                            }
                        }
                    }
                }
                Ok(input)
            }
        }
        d.deserialize_map(V)
    }
}

impl Validate for CreateDealInput {
    type Output = CreateDeal;

    fn validate(self) -> Result<CreateDeal, FieldErrors> {
        let mut errors = FieldErrors::new();
        let mut fail = |field: &str, message: &str| errors.entry(field.to_string()).or_default().push(message.to_string());
        let title = match self.title {
            Slot::Missing | Slot::Null => { fail("title", "is required"); None }
            Slot::WrongType => { fail("title", "must be a string"); None }
            Slot::Value(t) => {
                let n = t.chars().count();
                if !(1..=MAX_TITLE_CHARS).contains(&n) {
                    fail("title", "must be 1 to 200 characters long");
                    None
                } else if t.contains('\0') {
                    // PostgreSQL `text` cannot hold U+0000.
                    fail("title", "must not contain U+0000");
                    None
                } else {
                    Some(t)
                }
            }
        };
        let amount_cents = match self.amount_cents {
            Slot::Missing | Slot::Null => { fail("amount_cents", "is required"); None }
            // A JSON number beyond u64 arrives as a float (no arbitrary precision), so the
            // wrong-type and out-of-range messages are one.
            Slot::WrongType => { fail("amount_cents", AMOUNT_RULE); None }
            Slot::Value(a) => {
                if (0..=i128::from(MAX_AMOUNT_CENTS)).contains(&a) { Some(a as i64) } else { fail("amount_cents", AMOUNT_RULE); None }
            }
        };
        let stage = match self.stage {
            Slot::Missing | Slot::Null => { fail("stage", "is required"); None }
            Slot::WrongType => { fail("stage", "must be a string"); None }
            Slot::Value(s) => match STAGES.iter().find(|st| **st == s) {
                Some(st) => Some(*st),
                None => { fail("stage", "must be one of: lead, qualified, proposal, negotiation, won, lost"); None }
            },
        };
        for key in &self.unknown {
            fail(key, "is not an accepted field");
        }
        match (title, amount_cents, stage) {
            (Some(title), Some(amount_cents), Some(stage)) if errors.is_empty() => Ok(CreateDeal { title, amount_cents, stage }),
            _ => Err(errors),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extract::json::parse_body;

    fn both(body: &str) -> Result<CreateDeal, String> {
        let one = parse_body::<CreateDealInput>(body.as_bytes(), false).map_err(|e| format!("{e:?}")).and_then(|d| d.validate().map_err(|e| format!("{e:?}")));
        let two = parse_body::<CreateDealInput>(body.as_bytes(), true).map_err(|e| format!("{e:?}")).and_then(|d| d.validate().map_err(|e| format!("{e:?}")));
        assert_eq!(one, two, "direct and Value-first parsing differ on {body}");
        one
    }

    #[test]
    fn valid_and_invalid_bodies_agree_across_both_parsers() {
        let ok = both(r#"{"title":"Ünïcode","amount_cents":0,"stage":"won"}"#).unwrap();
        assert_eq!(ok, CreateDeal { title: "Ünïcode".into(), amount_cents: 0, stage: "won" });
        assert!(both(&format!(r#"{{"title":"{}","amount_cents":1000000000000,"stage":"lead"}}"#, "é".repeat(200))).is_ok());
        let e = both(&format!(r#"{{"title":"{}","amount_cents":1000000000001,"stage":"x"}}"#, "é".repeat(201))).unwrap_err();
        assert!(e.contains("title") && e.contains("amount_cents") && e.contains("stage"), "{e}");
        let e = both(r#"{"title":1,"amount_cents":"5","stage":null,"extra":[1,{"a":2}]}"#).unwrap_err();
        assert_eq!(e, r#"{"amount_cents": ["must be an integer from 0 to 1000000000000"], "extra": ["is not an accepted field"], "stage": ["is required"], "title": ["must be a string"]}"#);
        let e = both(r#"{"title":"t","amount_cents":1.5,"stage":"won"}"#).unwrap_err();
        assert!(e.contains(AMOUNT_RULE), "{e}");
        let e = both(r#"{"title":"t","amount_cents":-1,"stage":"won"}"#).unwrap_err();
        assert!(e.contains(AMOUNT_RULE), "{e}");
        assert_eq!(both(r#"[1,2]"#).unwrap_err(), r#"Validation({"body": ["must be a JSON object"]})"#);
        assert_eq!(both(r#"{"title":"#).unwrap_err(), r#"MalformedJson("malformed JSON body")"#);
        assert_eq!(both(r#"{"title":"a"} x"#).unwrap_err(), r#"MalformedJson("malformed JSON body")"#);
        assert_eq!(both("").unwrap_err(), r#"MalformedJson("malformed JSON body")"#);
        let e = both(r#"{"title":"a\u0000b","amount_cents":1,"stage":"won"}"#).unwrap_err();
        assert!(e.contains("title") && e.contains("U+0000"), "{e}");
        let e = both(r#"{"title":"t","amount_cents":100.0,"stage":"won"}"#).unwrap_err();
        assert!(e.contains(AMOUNT_RULE), "{e}");
        let e = both(r#"{"title":"t","amount_cents":99999999999999999999,"stage":"won"}"#).unwrap_err();
        assert!(e.contains(AMOUNT_RULE), "{e}");
        assert!(both(r#"{"title":"t","amount_cents":5,"stage":"Won"}"#).is_err());
        // Duplicate keys: the last one wins in both.
        assert_eq!(both(r#"{"title":1,"title":"b","amount_cents":5,"stage":"lead"}"#).unwrap().title, "b");
    }
}
