//! Generates Rust bindings for the installed Slurm's `slurm.h` (job descriptions, the global
//! configuration and `SLURM_VERSION_NUMBER`), so the plugin is built against exactly the
//! Slurm it will be loaded into. The header folder is `$SLURM_INCLUDE_DIR` (default
//! `/usr/include`, where Debian's libslurm-dev puts `slurm/slurm.h`).

use std::path::PathBuf;

fn main() {
    let include = std::env::var("SLURM_INCLUDE_DIR").unwrap_or_else(|_| "/usr/include".to_string());
    let header = PathBuf::from(&include).join("slurm/slurm.h");
    println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");
    println!("cargo:rerun-if-changed={}", header.display());
    println!(
        "cargo:rerun-if-changed={}",
        PathBuf::from(&include)
            .join("slurm/slurm_version.h")
            .display()
    );
    if !header.exists() {
        panic!(
            "{} not found: install Slurm's headers (Debian: apt-get install libslurm-dev) or set SLURM_INCLUDE_DIR",
            header.display()
        );
    }
    let bindings = bindgen::Builder::default()
        .header_contents("wrapper.h", "#include <slurm/slurm.h>\n#include <slurm/slurm_errno.h>\n#include <slurm/slurm_version.h>\n")
        .clang_arg(format!("-I{include}"))
        .allowlist_type("job_desc_msg_t")
        .allowlist_type("slurm_conf_t")
        .allowlist_var("SLURM_VERSION_NUMBER")
        .allowlist_var("SLURM_SUCCESS")
        .allowlist_var("SLURM_ERROR")
        .allowlist_var("NO_VAL")
        .layout_tests(false)
        .generate()
        .unwrap_or_else(|e| panic!("bindgen could not read {}: {e}", header.display()));
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let out = out_dir.join("slurm.rs");
    bindings
        .write_to_file(&out)
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", out.display()));
    write_built_for(&include, &out_dir);
}

/// Writes `built_for.rs`: the release the headers are of, as a marker string that
/// `install.sh` finds in the built library (`hadar-built-for-slurm=0x1a0503`), so that it can
/// refuse a library built for another release before Slurm refuses to load it.
fn write_built_for(include: &str, out_dir: &std::path::Path) {
    let version_h = PathBuf::from(include).join("slurm/slurm_version.h");
    let text = std::fs::read_to_string(&version_h)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", version_h.display()));
    let number = text
        .lines()
        .find_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some("#define") && w.next() == Some("SLURM_VERSION_NUMBER"))
                .then(|| w.next().map(str::to_string))
                .flatten()
        })
        .unwrap_or_else(|| panic!("{} defines no SLURM_VERSION_NUMBER", version_h.display()));
    let marker = format!("hadar-built-for-slurm={number}");
    let code = format!(
        "/// The Slurm release the plugin was built for, as a marker string `install.sh` reads.\n\
         #[used]\n#[unsafe(no_mangle)]\npub static hadar_built_for_slurm: [u8; {}] = *b\"{marker}\\0\";\n",
        marker.len() + 1,
    );
    let path = out_dir.join("built_for.rs");
    std::fs::write(&path, code).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}
