//! With the `vendored-libjpeg-turbo` feature: the version of the libjpeg-turbo that
//! turbojpeg-sys built from source, read from the `jconfig.h` it installed, so the decoder
//! can report the library it really links.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_VENDORED_LIBJPEG_TURBO").is_none() {
        return;
    }
    // turbojpeg-sys (`links = "turbojpeg"`) passes its include folders, comma-separated.
    let include = std::env::var("DEP_TURBOJPEG_INCLUDE").unwrap_or_default();
    let version = include
        .split(',')
        .filter_map(|dir| std::fs::read_to_string(std::path::Path::new(dir).join("jconfig.h")).ok())
        .find_map(|header| {
            header.lines().find_map(|line| {
                let rest = line.trim().strip_prefix("#define LIBJPEG_TURBO_VERSION")?;
                let v = rest.trim();
                (!v.is_empty() && rest.starts_with(char::is_whitespace)).then(|| v.to_owned())
            })
        });
    match version {
        Some(v) => println!("cargo:rustc-env=MMCACHE_LIBJPEG_TURBO_VERSION={v}"),
        None => panic!("no LIBJPEG_TURBO_VERSION in jconfig.h under {include:?}"),
    }
}
