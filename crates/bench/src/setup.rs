//! What a capacity comparison needs on this machine and how it gets it: the emulated disk
//! (root, `/dev/fuse`, loop devices, `losetup`, `mkfs.ext4`; the FUSE device is mounted with
//! mount(2), so `fusermount3` is not needed) and the peers (nginx, Apache). On Debian or
//! Ubuntu as root the missing packages are installed with apt-get, one line each; with
//! installing refused, as another user or on another system the exact command to run is
//! printed instead.
//!
//! [`decide`] is the pure decision from the [`Facts`]; [`prepare`] gathers the facts from a
//! [`System`] and carries the decision out on it ([`Host`] is this machine).

use std::path::Path;
use std::process::{Command, Stdio};

/// A package the comparison needs, found by the program it installs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Need {
    /// The program whose absence means the package is missing.
    pub program: &'static str,
    /// The Debian package that installs it.
    pub package: &'static str,
    /// What the comparison uses it for (one phrase).
    pub purpose: &'static str,
    /// Debian starts this service on install; it is stopped again so it does not share the
    /// machine with the measurement.
    pub service: Option<&'static str>,
}

/// Tools of the emulated disk (root only: it attaches a loop device and formats it).
pub const DISK_NEEDS: [Need; 2] = [
    Need {
        program: "losetup",
        package: "mount",
        purpose: "the emulated disk's loop device",
        service: None,
    },
    Need {
        program: "mkfs.ext4",
        package: "e2fsprogs",
        purpose: "the emulated disk's file system",
        service: None,
    },
];

/// The servers vodkit is compared with.
pub const NGINX: Need = Need {
    program: "nginx",
    package: "nginx",
    purpose: "the comparison's default web server",
    service: Some("nginx"),
};
pub const APACHE: Need = Need {
    program: "apache2",
    package: "apache2",
    purpose: "the comparison's second web server",
    service: Some("apache2"),
};

/// What the decision looks at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    pub root: bool,
    /// Debian or Ubuntu: apt-get is there to install with.
    pub apt: bool,
    pub dev_fuse: bool,
    pub loop_control: bool,
    /// `fusermount3` (or `fusermount`) is on PATH.
    pub fusermount: bool,
    /// The needs whose program is missing.
    pub missing: Vec<Need>,
}

/// What to do, and what to say (one line each).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Decision {
    /// Packages to install now with apt-get.
    pub install: Vec<Need>,
    /// Lines for the user: what is installed, what to run, how the disk is mounted.
    pub lines: Vec<String>,
}

/// The command that installs `packages`, as the user must type it.
pub fn install_command(packages: &[&str], root: bool) -> String {
    format!(
        "{}apt-get install -y {}",
        if root { "" } else { "sudo " },
        packages.join(" ")
    )
}

/// The one line for a peer that is not installed (`vodkit bench`, the demo with installing
/// refused): what to run to get it.
pub fn missing_peer(need: &Need) -> String {
    format!(
        "{} is not installed: skipped (run `{}` as root)",
        need.program,
        install_command(&[need.package], true)
    )
}

/// Decide from the facts. `allow_install`: false under `--no-install`.
pub fn decide(f: &Facts, allow_install: bool) -> Decision {
    let mut d = Decision::default();
    let disk_possible = f.root && f.dev_fuse && f.loop_control;
    if !f.root {
        d.lines.push(
            "the emulated disk needs root (FUSE, loop device, mkfs): run `sudo vodkit demo` for it"
                .into(),
        );
    } else {
        if !f.dev_fuse {
            d.lines
                .push("the emulated disk needs /dev/fuse: run `modprobe fuse` as root".into());
        }
        if !f.loop_control {
            d.lines.push(
                "the emulated disk needs /dev/loop-control: run `modprobe loop` as root".into(),
            );
        }
        if f.dev_fuse && !f.fusermount {
            d.lines.push(
                "fusermount3 is not installed: the emulated disk's FUSE device is mounted with mount(2) directly (root)"
                    .into(),
            );
        }
    }
    // Disk tools matter only where the emulated disk can run; peers everywhere.
    let wanted: Vec<Need> = f
        .missing
        .iter()
        .filter(|n| disk_possible || !DISK_NEEDS.contains(n))
        .copied()
        .collect();
    if wanted.is_empty() {
        return d;
    }
    let packages: Vec<&str> = wanted.iter().map(|n| n.package).collect();
    let names = packages.join(", ");
    if !f.apt {
        d.lines.push(format!(
            "{names} not installed: install them with this system's package manager \
             (Debian/Ubuntu: `{}`)",
            install_command(&packages, f.root)
        ));
    } else if !f.root {
        d.lines.push(format!(
            "{names} not installed: run `{}`",
            install_command(&packages, false)
        ));
    } else if !allow_install {
        d.lines.push(format!(
            "{names} not installed and --no-install given: run `{}`",
            install_command(&packages, true)
        ));
    } else {
        for n in &wanted {
            d.lines.push(format!(
                "installing {} ({}): `{}`",
                n.package,
                n.purpose,
                install_command(&[n.package], true)
            ));
        }
        d.install = wanted;
    }
    d
}

/// The machine as setup sees and changes it (a fake one in tests).
pub trait System {
    fn is_root(&self) -> bool;
    fn has_apt(&self) -> bool;
    fn exists(&self, path: &str) -> bool;
    fn has_program(&self, program: &str) -> bool;
    /// Install the packages (non-interactive); the error is one line.
    fn install(&mut self, packages: &[&str]) -> Result<(), String>;
    /// Stop a service the package manager started.
    fn stop_service(&mut self, name: &str) -> Result<(), String>;
}

/// The facts of `sys` for the given needs.
pub fn facts(sys: &impl System, needs: &[Need]) -> Facts {
    Facts {
        root: sys.is_root(),
        apt: sys.has_apt(),
        dev_fuse: sys.exists("/dev/fuse"),
        loop_control: sys.exists("/dev/loop-control"),
        fusermount: sys.has_program("fusermount3") || sys.has_program("fusermount"),
        missing: needs
            .iter()
            .filter(|n| !sys.has_program(n.program))
            .copied()
            .collect(),
    }
}

/// Decide and act: installs what is missing where it may (then stops the services Debian
/// started), and returns every line said, in order, for the terminal and the report.
/// Every line is also passed to `say` as it happens, before a slow install.
pub fn prepare(
    sys: &mut impl System,
    needs: &[Need],
    allow_install: bool,
    say: &mut impl FnMut(&str),
) -> Vec<String> {
    let d = decide(&facts(sys, needs), allow_install);
    let mut lines = Vec::new();
    let mut tell = |l: String, lines: &mut Vec<String>| {
        say(&l);
        lines.push(l);
    };
    for l in d.lines {
        tell(l, &mut lines);
    }
    if d.install.is_empty() {
        return lines;
    }
    let packages: Vec<&str> = d.install.iter().map(|n| n.package).collect();
    if let Err(e) = sys.install(&packages) {
        tell(
            format!(
                "installing {} failed: {e}; run `{}` and try again",
                packages.join(", "),
                install_command(&packages, true)
            ),
            &mut lines,
        );
        return lines;
    }
    for n in &d.install {
        if let Some(service) = n.service {
            let l = match sys.stop_service(service) {
                Ok(()) => format!("stopped the {service} service the install started"),
                Err(e) => format!("could not stop the {service} service the install started: {e}"),
            };
            tell(l, &mut lines);
        }
    }
    lines
}

/// This machine.
pub struct Host;

/// `program args…` with stdin closed and a non-interactive apt; the error is the last
/// non-empty line of its output.
fn quiet(program: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program)
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{program}: cannot run: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    let last = text
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .unwrap_or("failed");
    Err(format!("{program} {}: {last}", args.join(" ")))
}

impl System for Host {
    fn is_root(&self) -> bool {
        // SAFETY: geteuid has no preconditions and cannot fail.
        unsafe { libc::geteuid() == 0 }
    }

    fn has_apt(&self) -> bool {
        Path::new("/etc/debian_version").exists() && self.has_program("apt-get")
    }

    fn exists(&self, path: &str) -> bool {
        Path::new(path).exists()
    }

    fn has_program(&self, program: &str) -> bool {
        vodkit_disk::testbed::system::have_tool(program)
    }

    fn install(&mut self, packages: &[&str]) -> Result<(), String> {
        // A fresh machine's package lists may be stale or empty: refresh them first.
        quiet("apt-get", &["update", "-q"])?;
        let mut args = vec!["install", "-y", "-q"];
        args.extend_from_slice(packages);
        quiet("apt-get", &args)
    }

    fn stop_service(&mut self, name: &str) -> Result<(), String> {
        if self.has_program("service") {
            quiet("service", &[name, "stop"])
        } else {
            quiet(&format!("/etc/init.d/{name}"), &["stop"])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_needs() -> Vec<Need> {
        let mut v = DISK_NEEDS.to_vec();
        v.extend([NGINX, APACHE]);
        v
    }

    /// A machine described by its facts, recording what is done to it.
    #[derive(Default)]
    struct Fake {
        root: bool,
        apt: bool,
        paths: Vec<&'static str>,
        programs: Vec<&'static str>,
        install_fails: bool,
        installed: Vec<String>,
        stopped: Vec<String>,
    }

    impl System for Fake {
        fn is_root(&self) -> bool {
            self.root
        }
        fn has_apt(&self) -> bool {
            self.apt
        }
        fn exists(&self, path: &str) -> bool {
            self.paths.contains(&path)
        }
        fn has_program(&self, program: &str) -> bool {
            self.programs.contains(&program)
        }
        fn install(&mut self, packages: &[&str]) -> Result<(), String> {
            if self.install_fails {
                return Err("apt-get install: E: Unable to locate package".into());
            }
            self.installed
                .extend(packages.iter().map(|p| p.to_string()));
            Ok(())
        }
        fn stop_service(&mut self, name: &str) -> Result<(), String> {
            self.stopped.push(name.into());
            Ok(())
        }
    }

    /// A fresh Debian machine as root: devices present, nginx, Apache and fuse3 absent.
    fn fresh_debian_root() -> Fake {
        Fake {
            root: true,
            apt: true,
            paths: vec!["/dev/fuse", "/dev/loop-control"],
            programs: vec!["losetup", "mkfs.ext4", "service"],
            ..Fake::default()
        }
    }

    fn run(sys: &mut Fake, allow: bool) -> Vec<String> {
        let mut said = Vec::new();
        let lines = prepare(sys, &all_needs(), allow, &mut |l: &str| {
            said.push(l.to_string())
        });
        assert_eq!(said, lines, "every line is said as it happens");
        lines
    }

    #[test]
    fn root_on_debian_installs_the_peers_one_line_each_and_stops_their_services() {
        let mut sys = fresh_debian_root();
        let lines = run(&mut sys, true);
        assert_eq!(sys.installed, ["nginx", "apache2"]);
        assert_eq!(sys.stopped, ["nginx", "apache2"]);
        assert!(
            lines[0].contains("mounted with mount(2) directly"),
            "{lines:?}"
        );
        assert_eq!(
            lines[1],
            "installing nginx (the comparison's default web server): `apt-get install -y nginx`"
        );
        assert!(lines[2].starts_with("installing apache2 ("), "{lines:?}");
        assert_eq!(lines[3], "stopped the nginx service the install started");
        assert_eq!(lines.len(), 5, "{lines:?}");
    }

    #[test]
    fn no_install_refuses_and_prints_the_exact_command() {
        let mut sys = fresh_debian_root();
        let lines = run(&mut sys, false);
        assert!(sys.installed.is_empty() && sys.stopped.is_empty());
        assert!(
            lines.iter().any(|l| l
                == "nginx, apache2 not installed and --no-install given: run `apt-get install -y nginx apache2`"),
            "{lines:?}"
        );
    }

    #[test]
    fn another_user_is_told_to_use_sudo_and_nothing_is_installed() {
        let mut sys = Fake {
            root: false,
            ..fresh_debian_root()
        };
        // mkfs.ext4 missing too: it is not asked for, the disk cannot run without root.
        sys.programs.retain(|p| *p != "mkfs.ext4");
        let lines = run(&mut sys, true);
        assert!(sys.installed.is_empty());
        assert_eq!(
            lines,
            [
                "the emulated disk needs root (FUSE, loop device, mkfs): run `sudo vodkit demo` for it",
                "nginx, apache2 not installed: run `sudo apt-get install -y nginx apache2`",
            ]
        );
    }

    #[test]
    fn another_system_gets_the_debian_command_as_a_pointer() {
        let mut sys = Fake {
            apt: false,
            ..fresh_debian_root()
        };
        sys.programs.extend(["fusermount3", "apache2"]);
        let lines = run(&mut sys, true);
        assert!(sys.installed.is_empty());
        assert_eq!(
            lines,
            ["nginx not installed: install them with this system's package manager (Debian/Ubuntu: `apt-get install -y nginx`)"]
        );
    }

    #[test]
    fn a_complete_machine_needs_nothing_and_says_nothing() {
        let mut sys = fresh_debian_root();
        sys.programs.extend(["fusermount3", "nginx", "apache2"]);
        assert!(run(&mut sys, true).is_empty());
        assert!(sys.installed.is_empty());
    }

    #[test]
    fn missing_devices_and_disk_tools_are_named() {
        let mut sys = fresh_debian_root();
        sys.paths = vec!["/dev/loop-control"];
        sys.programs = vec!["nginx", "apache2", "fusermount3"];
        let lines = run(&mut sys, true);
        // Without /dev/fuse the disk cannot run: its tools are not installed for nothing.
        assert_eq!(
            lines,
            ["the emulated disk needs /dev/fuse: run `modprobe fuse` as root"]
        );
        sys.paths = vec!["/dev/fuse", "/dev/loop-control"];
        let lines = run(&mut sys, true);
        assert_eq!(sys.installed, ["mount", "e2fsprogs"]);
        assert!(sys.stopped.is_empty(), "no service to stop");
        assert_eq!(lines.len(), 2, "{lines:?}");
    }

    #[test]
    fn a_failed_install_says_what_to_run() {
        let mut sys = Fake {
            install_fails: true,
            ..fresh_debian_root()
        };
        let lines = run(&mut sys, true);
        let last = lines.last().unwrap();
        assert!(
            last.starts_with("installing nginx, apache2 failed: apt-get install: E: Unable")
                && last.ends_with("run `apt-get install -y nginx apache2` and try again"),
            "{last}"
        );
        assert!(sys.stopped.is_empty());
    }

    #[test]
    fn the_peer_line_names_the_command() {
        assert_eq!(
            missing_peer(&NGINX),
            "nginx is not installed: skipped (run `apt-get install -y nginx` as root)"
        );
    }
}
