//! No code: this crate only pins dependency features (see its Cargo.toml),
//! so the build, the unit tests and the end-to-end tests compile each
//! shared dependency once.
