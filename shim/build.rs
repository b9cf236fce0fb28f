//! Builds the preload library (C) as a shared object, plus the two C test programs, into
//! OUT_DIR. The library's bytes are embedded in the crate (see `src/library.rs`).

use std::path::{Path, PathBuf};
use std::process::Command;

fn compile(out: &Path, name: &str, sources: &[&str], extra: &[&str]) -> PathBuf {
    let target = out.join(name);
    let compiler = cc::Build::new().opt_level(2).get_compiler();
    let mut cmd: Command = compiler.to_command();
    cmd.args(["-std=gnu11", "-Wall", "-Wextra", "-fPIC", "-Ic"])
        .args(sources)
        .args(extra)
        .arg("-o")
        .arg(&target);
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("cannot run the C compiler for {name}: {e}"));
    assert!(status.success(), "compiling {name} failed");
    target
}

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    for f in [
        "c/vodkit_preload.c",
        "c/protocol.h",
        "c/tests/transparency.c",
        "c/tests/stress.c",
        "c/tests/content.h",
    ] {
        println!("cargo:rerun-if-changed={f}");
    }
    let lib = compile(
        &out,
        "libvodkit_preload.so",
        &["c/vodkit_preload.c"],
        &[
            "-Werror",
            "-shared",
            "-fvisibility=hidden",
            "-ldl",
            "-pthread",
        ],
    );
    println!("cargo:rustc-env=VODKIT_PRELOAD_SO={}", lib.display());
    let transparency = compile(
        &out,
        "vk_transparency",
        &["c/tests/transparency.c"],
        &["-D_FORTIFY_SOURCE=2"],
    );
    println!(
        "cargo:rustc-env=VODKIT_TRANSPARENCY_BIN={}",
        transparency.display()
    );
    let stress = compile(&out, "vk_stress", &["c/tests/stress.c"], &["-pthread"]);
    println!("cargo:rustc-env=VODKIT_STRESS_BIN={}", stress.display());
}
