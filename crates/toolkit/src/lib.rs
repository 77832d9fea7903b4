//! stormguard's offline policy tools: everything that reads a policy file
//! and needs no daemon. Load and validate it ([`policy`]), lint it for storm
//! risk ([`lint`], [`check`]), simulate a herd against it and forecast what
//! it does to a recovering server ([`sim`], [`simulate`]), search for a
//! better one ([`tune`]), and render it as a mesh's retry configuration
//! ([`render`]). The daemon calls the loader, the linter and the renderer;
//! the command line calls the rest, with its [`flags`] and the fleet's
//! [`shape`] as the commands share them.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod check;
pub mod diff;
pub mod flags;
pub mod lint;
pub mod policy;
pub mod render;
pub mod shape;
pub mod sim;
pub mod simulate;
pub mod text;
pub mod tune;
