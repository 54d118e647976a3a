//! The haproxy validator's precheck: Lua only from intact package files.
//!
//! `haproxy -c` runs every script `lua-load` (or `lua-load-per-thread`)
//! names while it reads the configuration, before it judges anything, and
//! a configuration can name itself: a file that is both a configuration and
//! a Lua chunk (`# ...`, `--[[`, `global`, `lua-load` of its own path,
//! `]]`, then Lua) is refused by haproxy, but only after its Lua ran, as
//! root, in the validator, from `datum plan` (which lays the file at its own
//! path), and a root process can leave the validator's view. So before
//! haproxy runs, every script the configuration loads must be a file an
//! installed Debian package owns, as it was installed (nginx's rule for
//! modules, [`super::nginx`]); `lua-prepend-path`, which would let such a
//! script `require` another file, is refused, and so is a path haproxy would
//! expand (`$VARIABLE`) or resolve against its working folder.

use std::path::Path;

use datum_host::sandbox::Sandbox;

use super::apache::words;
use super::config_walk;
use super::nginx::check_module;

/// The precheck: `config` is the staged file's path in the view.
pub fn precheck(config: &Path, view: &Sandbox) -> Result<(), String> {
    // haproxy reports a file it cannot read itself.
    let bytes = config_walk::read(view, config)?.unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes);
    for (i, line) in text.lines().enumerate() {
        let at = format!("{}:{}", config.display(), i + 1);
        let words = words(line.trim_start());
        let Some((name, args)) = words.split_first() else {
            continue;
        };
        match name.as_str() {
            "lua-load" | "lua-load-per-thread" => {
                let script = args.first().map(String::as_str).unwrap_or_default();
                if script.contains('$') || !Path::new(script).is_absolute() {
                    return Err(format!(
                        "{at}: {name} {script}: Datum checks only an absolute path without variables"
                    ));
                }
                check_module(Path::new(script), view)
                    .map_err(|why| format!("{at}: {name} {script}: {why}"))?;
            }
            "lua-prepend-path" => {
                return Err(format!(
                    "{at}: {name}: a Lua search path would let a script load files Datum has not checked"
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_outside_any_package_is_refused_and_the_file_itself_too() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("haproxy.cfg");
        let script = dir.path().join("x.lua");
        std::fs::write(&script, "os.exit(1)\n").unwrap();
        std::fs::write(
            &cfg,
            format!("global\n    lua-load \"{}\"\n", script.display()),
        )
        .unwrap();
        let err = precheck(&cfg, &Sandbox::new()).unwrap_err();
        assert!(err.contains("haproxy.cfg:2: lua-load"), "{err}");
        assert!(err.contains("not a file of an installed package"), "{err}");

        // The configuration loading itself, as laid into the view.
        let mut view = Sandbox::new();
        let polyglot = "# a comment to both\n--[[\nglobal\n  lua-load /etc/haproxy/haproxy.cfg\n]]\nos.execute('true')\n";
        view.place(
            "/etc/haproxy/haproxy.cfg",
            polyglot.as_bytes().to_vec(),
            0o644,
            None,
            None,
        );
        let err = precheck(Path::new("/etc/haproxy/haproxy.cfg"), &view).unwrap_err();
        assert!(err.contains("one of the files being validated"), "{err}");

        for (line, why) in [
            ("lua-load x.lua", "absolute"),
            ("lua-load-per-thread \"$HOME/x.lua\"", "variables"),
            ("lua-prepend-path /srv/lua/?.lua", "search path"),
        ] {
            std::fs::write(&cfg, format!("global\n  {line}\n")).unwrap();
            let err = precheck(&cfg, &Sandbox::new()).unwrap_err();
            assert!(err.contains(why), "{line}: {err}");
        }
        std::fs::write(&cfg, "global\n  maxconn 100\n").unwrap();
        assert!(precheck(&cfg, &Sandbox::new()).is_ok());
    }
}
