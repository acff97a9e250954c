//! What the handlers share: times (RFC 3339 or epoch milliseconds), ranges and
//! pages bounded by `[serve]`, and the schemas of time parameters.

use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use crate::error::{ApiResult, AppError};
use crate::state::AppState;
use common::now_ms;

/// Latest time accepted: 9999-12-31T23:59:59.999Z.
const MAX_TIME_MS: i64 = 253_402_300_799_999;
const DEFAULT_SPAN_MS: i64 = 3_600_000;
const DEFAULT_PAGE_SIZE: u32 = 100;

/// RFC 3339 (`2026-11-29T10:00:00Z`) or epoch milliseconds.
pub fn parse_time(name: &str, value: &str) -> ApiResult<i64> {
    let ms = match value.parse::<i64>() {
        Ok(ms) => ms,
        Err(_) => chrono::DateTime::parse_from_rfc3339(value)
            .map_err(|e| {
                AppError::bad_request(format!(
                    "{name}: {value:?} is neither RFC 3339 nor epoch milliseconds ({e})"
                ))
            })?
            .timestamp_millis(),
    };
    if !(0..=MAX_TIME_MS).contains(&ms) {
        return Err(AppError::bad_request(format!(
            "{name}: {value:?} is outside 1970-01-01 .. 9999-12-31"
        )));
    }
    Ok(ms)
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct RangeQuery {
    /// Start of the range (inclusive, window starts), RFC 3339 (2026-11-29T10:00:00Z) or
    /// epoch milliseconds. Default: one hour before `to`. An empty value means the default.
    #[param(value_type = Option<TimeParam>, inline, example = "2026-11-29T00:00:00Z")]
    pub from: Option<String>,
    /// End of the range (exclusive), RFC 3339 (2026-11-29T10:00:00Z) or epoch
    /// milliseconds. Default: now. An empty value means the default.
    #[param(value_type = Option<TimeParam>, inline)]
    pub to: Option<String>,
}

impl RangeQuery {
    /// `[from, to)`; `to` defaults to now and `from` to one hour before `to`.
    pub(super) fn resolve(&self, state: &AppState) -> ApiResult<(i64, i64)> {
        resolve_range(state, self.from.as_deref(), self.to.as_deref())
    }
}

pub(crate) fn resolve_range(
    state: &AppState,
    from: Option<&str>,
    to: Option<&str>,
) -> ApiResult<(i64, i64)> {
    // `?to=` (an empty value, as forms send) means the default, like an absent one.
    let (from, to) = (from.filter(|s| !s.is_empty()), to.filter(|s| !s.is_empty()));
    let to = match to {
        Some(t) => parse_time("to", t)?,
        None => now_ms(),
    };
    let from = match from {
        Some(f) => parse_time("from", f)?,
        None => (to - DEFAULT_SPAN_MS).max(0),
    };
    if from >= to {
        return Err(AppError::bad_request(format!(
            "from ({from}) must be before to ({to})"
        )));
    }
    let max = state.config.serve.max_range.as_millis() as i64;
    if to - from > max {
        return Err(AppError::bad_request(format!(
            "range of {} ms exceeds the maximum of {max} ms (serve.max_range)",
            to - from
        )));
    }
    Ok((from, to))
}

pub(super) fn page(
    state: &AppState,
    page: Option<u32>,
    page_size: Option<u32>,
) -> ApiResult<(usize, usize)> {
    let page = page.unwrap_or(1);
    if page == 0 {
        return Err(AppError::bad_request("page starts at 1"));
    }
    let max = state.config.serve.max_page_size;
    let size = page_size.unwrap_or(DEFAULT_PAGE_SIZE.min(max));
    if size == 0 || size > max {
        return Err(AppError::bad_request(format!(
            "page_size must be within 1..={max}"
        )));
    }
    Ok((page as usize, size as usize))
}

// Time parameters: only schemas (the doc comments are their descriptions); handlers
// take the text and parse it with [`parse_time`]. The pattern admits years
// 1971-2999 and days 1-28 of a month so that every value it admits is a date.

/// RFC 3339 or epoch milliseconds; empty means the default.
#[derive(ToSchema)]
#[schema(
    pattern = "^([0-9]{1,14}|(197[1-9]|19[89][0-9]|2[0-9]{3})-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,9})?(Z|[+-](0[0-9]|1[0-3]):[0-5][0-9]))?$"
)]
pub struct TimeParam(pub String);

/// RFC 3339 or epoch milliseconds.
#[derive(ToSchema)]
#[schema(
    pattern = "^([0-9]{1,14}|(197[1-9]|19[89][0-9]|2[0-9]{3})-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,9})?(Z|[+-](0[0-9]|1[0-3]):[0-5][0-9]))$"
)]
pub struct TimeValue(pub String);
