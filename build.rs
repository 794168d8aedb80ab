// The packs in extensions/ are embedded with include_dir; rebuild when they change.
fn main() {
    println!("cargo:rerun-if-changed=extensions");
    println!("cargo:rerun-if-env-changed=STACKHOOK_RELR");
    relr();
}

/// Release binaries for glibc pack their relative relocations (DT_RELR): the table the
/// loader reads at every start shrinks from 1.5 MB to 20 KB, and with it the mapped
/// file pages every replica keeps. Needs binutils 2.38 or lld 15 to link and glibc
/// 2.36 to run (Debian 12, the image's base); `STACKHOOK_RELR=0` builds without.
fn relr() {
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    if var("CARGO_CFG_TARGET_OS") == "linux"
        && var("CARGO_CFG_TARGET_ENV") == "gnu"
        && var("PROFILE") == "release"
        && var("STACKHOOK_RELR") != "0"
    {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}
