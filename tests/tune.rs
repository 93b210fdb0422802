//! `skein tune`: check runs on this machine (whatever knobs it lacks) and changes
//! nothing; apply and revert work on a fake `/sys` and `/proc` tree (`--root`), never
//! on the host running the tests.

use std::path::Path;
use std::process::Command;

fn skein(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_skein")).args(args).output().unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

fn write(root: &Path, path: &str, text: &str) {
    let path = root.join(path.trim_start_matches('/'));
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, format!("{text}\n")).unwrap();
}

// On this machine, check prints one row per tunable and exits 0, however many knobs
// the VM lacks.
#[test]
fn check_runs_on_this_host() {
    let data = tempfile::tempdir().unwrap();
    let (ok, out) = skein(&["tune", "check", "--data-dir", data.path().to_str().unwrap()]);
    assert!(ok, "{out}");
    assert!(out.starts_with("tunable"), "{out}");
    for knob in ["transparent huge pages", "fs.aio-max-nr", "kernel.io_uring_disabled", "memlock limit", "clocksource"]
    {
        assert!(out.contains(knob), "no {knob} in:\n{out}");
    }
    assert!(!data.path().join("tune-revert.json").exists(), "check changes nothing");
}

// apply prints a diff and records the old values; revert restores them and prints
// the diff back; a second revert has nothing to do and says so with a failing exit.
#[test]
fn apply_and_revert_a_fake_tree() {
    let root = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let r = root.path();
    write(r, "/sys/devices/system/cpu/online", "0-1");
    write(r, "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor", "schedutil");
    write(r, "/sys/kernel/mm/transparent_hugepage/enabled", "[always] madvise never");
    write(r, "/proc/sys/vm/swappiness", "60");
    write(r, "/proc/sys/fs/aio-max-nr", "65536");
    let flags = ["--root", r.to_str().unwrap(), "--data-dir", data.path().to_str().unwrap(), "--cores", "1"];
    let (ok, out) = skein(&[&["tune", "check"], &flags[..]].concat());
    assert!(ok && out.contains("CHANGE cpu0 frequency governor"), "{out}");
    let (ok, out) = skein(&[&["tune", "apply"], &flags[..]].concat());
    assert!(ok, "{out}");
    assert!(out.contains("/proc/sys/vm/swappiness: 60 -> 1"), "{out}");
    assert!(out.contains("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor: schedutil -> performance"), "{out}");
    assert!(out.contains("/sys/kernel/mm/transparent_hugepage/enabled: always -> madvise"), "{out}");
    let read = |path: &str| std::fs::read_to_string(r.join(path)).unwrap().trim().to_string();
    assert_eq!(read("proc/sys/fs/aio-max-nr"), "1048576");
    let (ok, out) = skein(&[&["tune", "check"], &flags[..]].concat());
    assert!(ok && out.contains("ok     vm.swappiness"), "{out}");
    let (ok, out) = skein(&[&["tune", "revert"], &flags[..]].concat());
    assert!(ok, "{out}");
    assert!(out.contains("/proc/sys/vm/swappiness: 1 -> 60"), "{out}");
    assert_eq!(read("proc/sys/fs/aio-max-nr"), "65536");
    assert_eq!(read("sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"), "schedutil");
    let (ok, out) = skein(&[&["tune", "revert"], &flags[..]].concat());
    assert!(!ok && out.contains("nothing to revert"), "{out}");
    let (ok, out) = skein(&["tune", "check", "--cores", "9-12", "--root", r.to_str().unwrap()]);
    assert!(!ok && out.contains("invalid --cores"), "{out}");
}
