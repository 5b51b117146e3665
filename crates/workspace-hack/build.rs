//! Empty: its presence makes cargo count this crate's build-dependencies,
//! whose features are unified with the other build scripts' (see Cargo.toml).
fn main() {}
