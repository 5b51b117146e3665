//! Finds the system libfabric, compiles the C shim for its `static inline`
//! calls and generates the bindings with bindgen (see the crate doc for why
//! this happens at build time rather than from a checked-in file).

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-changed=shim.h");
    println!("cargo:rerun-if-changed=shim.c");
    println!("cargo:rerun-if-env-changed=LIBFABRIC_INCLUDE_DIR");

    // pkg-config emits the link flags; fall back to the plain library name
    // (Debian's libfabric-dev ships a .pc file, a hand-built one may not).
    let mut include_paths: Vec<PathBuf> = Vec::new();
    match pkg_config::Config::new().atleast_version("1.9").probe("libfabric") {
        Ok(lib) => include_paths.extend(lib.include_paths),
        Err(err) => {
            println!("cargo:warning=pkg-config could not find libfabric ({err}); linking -lfabric");
            println!("cargo:rustc-link-lib=fabric");
        }
    }
    if let Some(dir) = env::var_os("LIBFABRIC_INCLUDE_DIR") {
        include_paths.push(PathBuf::from(dir));
    }

    let mut build = cc::Build::new();
    build.file("shim.c").warnings(true);
    for path in &include_paths {
        build.include(path);
    }
    build.compile("fabric_shim");

    let mut builder = bindgen::Builder::default()
        .header("wrapper.h")
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .allowlist_function("fi_.*")
        .allowlist_function("fis_.*")
        .allowlist_type("fi_.*")
        .allowlist_type("fid_.*")
        .allowlist_var("FI_.*")
        .default_enum_style(bindgen::EnumVariation::Consts)
        .derive_default(true)
        .layout_tests(true)
        .generate_comments(false);
    for path in &include_paths {
        builder = builder.clang_arg(format!("-I{}", path.display()));
    }
    let bindings = builder.generate().expect(
        "bindgen failed on <rdma/fabric.h>: install libfabric-dev, clang and libclang-dev \
         (provisioning/host/install-deps.sh)",
    );
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR is set by cargo"));
    bindings
        .write_to_file(out.join("bindings.rs"))
        .expect("write bindings.rs");
}
