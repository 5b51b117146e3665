//! What every controller layer shares below the providers: where a lab's
//! state lives on disk and how long steps report progress.
//!
//! This crate owns the lab's state directory (its layout, `state.json`
//! written atomically, the per-lab lock, saved results), the [`progress`]
//! reporter trait the binary implements, and [`text`] helpers that put the
//! tail of a log into an error message.
//!
//! It must not know about providers, SSH or agents: it stores what they
//! found, it does not go and find it.
//!
//! # Layout
//! - the state directory, its files and its lock (re-exported at the root).
//! - [`progress`]: the `Reporter` trait and the `step` helper.
//! - [`live_labs`]: the per-user list of live labs (id -> state directory).
//! - [`text`]: the last lines of a text or a file.
#![warn(missing_docs)]

pub mod live_labs;
pub mod progress;
mod state;
pub mod text;

pub use state::*;
