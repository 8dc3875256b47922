//! Links librados (Debian: `librados-dev`).
fn main() {
    println!("cargo:rustc-link-lib=rados");
}
