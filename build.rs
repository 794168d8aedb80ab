// The packs in extensions/ are embedded with include_dir; rebuild when they change.
fn main() {
    println!("cargo:rerun-if-changed=extensions");
}
