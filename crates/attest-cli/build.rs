//! Release builds of the `attest` binary on Linux (ELF, glibc) link with
//! the hot-code layout of `build/hot_layout.rs`. Set `ATTEST_NO_HOT_LAYOUT`
//! to link without it (a linker that does not take GNU linker scripts'
//! `INSERT`, such as mold).

#[path = "build/hot_layout.rs"]
mod hot_layout;

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=hot-functions.txt");
    println!("cargo:rerun-if-changed=build/hot_layout.rs");
    println!("cargo:rerun-if-env-changed=ATTEST_NO_HOT_LAYOUT");
    let var = |name: &str| env::var(name).unwrap_or_default();
    // `PROFILE` is "release" for every profile that inherits from it
    // (`release-lto` too); debug builds and tests are left alone.
    let wanted = var("PROFILE") == "release"
        && var("CARGO_CFG_TARGET_OS") == "linux"
        && var("CARGO_CFG_TARGET_ENV") == "gnu"
        && env::var_os("ATTEST_NO_HOT_LAYOUT").is_none();
    if !wanted {
        return;
    }
    let list = std::fs::read_to_string("hot-functions.txt")
        .unwrap_or_else(|e| panic!("crates/attest-cli/hot-functions.txt: {e}"));
    let script = hot_layout::linker_script(&list)
        .unwrap_or_else(|e| panic!("crates/attest-cli/hot-functions.txt: {e}"));
    let path = PathBuf::from(var("OUT_DIR")).join("hot-layout.ld");
    std::fs::write(&path, script).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    // Through `-Xlinker`, not `-Wl,`: the latter splits at commas, which a
    // path may hold.
    println!("cargo:rustc-link-arg-bin=attest=-Xlinker");
    println!(
        "cargo:rustc-link-arg-bin=attest=--script={}",
        path.display()
    );
}
