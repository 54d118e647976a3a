//! One module per page. Each handler takes the [`Operator`] (so nothing is
//! shown to anyone not signed in), reads through the query layer and
//! [`crate::web::queries`], and hands the template a JSON context that
//! holds only what the page shows.
//!
//! Owns: the pages' contexts. Must not: write anything.

pub mod drift;
pub mod host;
pub mod hosts;
pub mod overview;
pub mod rollout;
pub mod stacks;

use serde_json::{Map, Value};

use super::auth::Operator;
use crate::api::App;
use crate::store::Backend;

/// `context` (a JSON object) with what every page needs: the time the page
/// is about (`now`, for "4 min ago"), who is signed in, which part of the
/// navigation is current, the store's name.
pub fn frame<B: Backend>(app: &App<B>, op: &Operator, nav: &str, context: Value) -> Value {
    let mut map = match context {
        Value::Object(m) => m,
        other => {
            let mut m = Map::new();
            m.insert("page".to_owned(), other);
            m
        }
    };
    map.insert("now".to_owned(), app.now().into());
    map.insert("me".to_owned(), op.frame());
    map.insert("nav".to_owned(), nav.into());
    map.insert("store".to_owned(), app.fleet.backend().name().into());
    map.insert("url".to_owned(), app.config.url.clone().into());
    Value::Object(map)
}

/// The severity order of states (most urgent first), for sorting.
pub fn severity(state: &str) -> usize {
    crate::views::STATES
        .iter()
        .position(|s| *s == state)
        .unwrap_or(crate::views::STATES.len())
}

/// The first line of a message (a table cell shows that much).
pub fn first_line(message: &str) -> &str {
    message.lines().next().unwrap_or("")
}
