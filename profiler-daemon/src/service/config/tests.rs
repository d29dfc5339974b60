//! The configuration's layers, defaults and refusals.

use super::*;

fn p() -> &'static Path {
    Path::new("/etc/gpuprofd/config.toml")
}

#[test]
fn the_printed_default_is_the_default() {
    assert_eq!(parse(DEFAULT_TOML, p()).unwrap(), Config::default());
    // Every key of the configuration appears in the printed default (commented keys count).
    let v: toml::Table = toml::from_str(&Config::default().to_toml()).unwrap();
    for (section, keys) in &v {
        assert!(DEFAULT_TOML.contains(&format!("[{section}]")), "{section}");
        for k in keys.as_table().unwrap().keys() {
            assert!(DEFAULT_TOML.contains(&format!("\n{k} = ")), "{section}.{k}");
        }
    }
    assert!(
        DEFAULT_TOML.contains("\n# lib = "),
        "nvml.lib is shown commented"
    );
    Config::default().validate(p()).unwrap();
}

#[test]
fn a_file_sets_only_what_it_names() {
    let c = parse(
        "[metrics]\nlisten = \"0.0.0.0:9500\"\n[capture]\nrescan_interval = \"0\"\n",
        p(),
    )
    .unwrap();
    assert_eq!(c.metrics.listen, "0.0.0.0:9500");
    assert_eq!(c.capture.rescan_interval, Dur(Duration::ZERO));
    assert_eq!(c.metrics.top_kernels, 10);
    assert_eq!(c.nvml, NvmlConfig::default());
    assert_eq!(c.control.socket, PathBuf::from("/run/gpuprofd.sock"));
}

#[test]
fn flags_override_the_file() {
    let dir = std::env::temp_dir().join(format!("gpuprofd-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("c.toml");
    std::fs::write(
        &f,
        "[metrics]\nenabled = false\nlisten = \"127.0.0.1:1\"\n[log]\nlevel = \"warn\"\n[nvml]\ninterval = \"250ms\"\n",
    )
    .unwrap();
    let over = Overrides {
        metrics_addr: Some("127.0.0.1:9999".into()),
        log_level: Some("debug".into()),
        no_nvml: true,
        ..Default::default()
    };
    let (c, used) = load(&Source::Explicit(f.clone()), &over).unwrap();
    assert!(used);
    assert!(c.metrics.enabled, "--metrics-addr turns metrics on");
    assert_eq!(c.metrics.listen, "127.0.0.1:9999");
    assert_eq!(c.log.level, "debug");
    assert!(!c.nvml.enabled);
    assert_eq!(
        c.nvml.interval,
        Dur(Duration::from_millis(250)),
        "file value kept"
    );
    assert_eq!(c.metrics_addr(), Some("127.0.0.1:9999".parse().unwrap()));
    // Missing: an error when asked for by name, defaults at the default path.
    let missing = dir.join("none.toml");
    let e = load(&Source::Explicit(missing.clone()), &Overrides::default()).unwrap_err();
    assert!(e.to_string().contains("none.toml"), "{e}");
    let (c, used) = load(&Source::Default(missing), &Overrides::default()).unwrap();
    assert!(!used);
    assert_eq!(c, Config::default());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_files_say_what_and_where() {
    let err = |text: &str| {
        let e = match parse(text, p()) {
            Ok(c) => c.validate(p()).unwrap_err(),
            Err(e) => e,
        };
        e.to_string()
    };
    let e = err("[metrics]\nlisten_on = \"x\"\n");
    assert!(e.contains("unknown field `listen_on`"), "{e}");
    assert!(e.contains("line 2, column 1: "), "{e}");
    assert!(e.contains("/etc/gpuprofd/config.toml"), "{e}");
    let e = err("[capture]\nring_buffer_mb = 3\n");
    assert!(
        e.contains("capture.ring_buffer_mb = 3") && e.contains("power of two"),
        "{e}"
    );
    let e = err("[metrics]\nlisten = \"localhost\"\n");
    assert!(e.contains("metrics.listen = \"localhost\""), "{e}");
    let e = err("[nvml]\ninterval = \"10ms\"\n");
    assert!(e.contains("at least 100ms"), "{e}");
    let e = err("[nvml]\ninterval = \"soon\"\n");
    assert!(e.contains("\"soon\" is not a duration"), "{e}");
    let e = err("[control]\nsocket = \"gpuprofd.sock\"\n");
    assert!(e.contains("absolute"), "{e}");
    let e = err("[control]\ngroup = \"no-such-group-gpuprofd\"\n");
    assert!(e.contains("no such group"), "{e}");
    let e = err("[log]\nlevel = \"gpuprofd=loud\"\n");
    assert!(e.contains("log.level"), "{e}");
    let e = err("[metrics]\ntop_kernels = 0\n");
    assert!(e.contains("between 1 and 1000"), "{e}");
    let e = err("metrics = 3\n");
    assert!(e.contains("invalid type"), "{e}");
}

#[test]
fn a_reload_takes_the_reloadable_keys_and_names_the_rest() {
    let old = Config::default();
    let mut new = Config::default();
    new.metrics.top_kernels = 3;
    new.metrics.per_process = true;
    new.log.level = "debug".into();
    new.capture.ring_buffer_mb = 64;
    new.metrics.listen = "127.0.0.1:9500".into();
    let Reload {
        next,
        changed,
        pending,
    } = old.reload_from(&new);
    assert_eq!(
        changed,
        ["metrics.per_process", "metrics.top_kernels", "log.level"]
    );
    assert_eq!(next.metrics.top_kernels, 3);
    assert!(next.metrics.per_process);
    assert_eq!(next.log.level, "debug");
    assert_eq!(
        next.capture.ring_buffer_mb, 16,
        "running value kept until a restart"
    );
    assert_eq!(next.metrics.listen, "127.0.0.1:19400");
    assert_eq!(pending, ["capture.ring_buffer_mb", "metrics.listen"]);
    let same = old.reload_from(&old);
    assert_eq!(same.next, old);
    assert!(same.changed.is_empty() && same.pending.is_empty());
}

#[test]
fn otlp_is_off_by_default_and_its_section_sets_the_push() {
    assert_eq!(Config::default().otlp.settings(), None);
    let c = parse(
        "[otlp]\nendpoint = \"http://collector:4318\"\ninterval = \"30s\"\n\
         headers = { authorization = \"Bearer x\" }\nresource = { \"k8s.cluster.name\" = \"a\" }\n",
        p(),
    )
    .unwrap();
    c.validate(p()).unwrap();
    let s = c.otlp.settings().unwrap();
    assert_eq!(s.url, "http://collector:4318/v1/metrics");
    assert_eq!(s.interval, Duration::from_secs(30));
    assert_eq!(s.timeout, Duration::from_secs(5));
    assert_eq!(s.headers["authorization"], "Bearer x");
    assert_eq!(s.resource["k8s.cluster.name"], "a");
}

#[test]
fn bad_otlp_settings_say_what() {
    let err = |text: &str| {
        parse(text, p())
            .unwrap()
            .validate(p())
            .unwrap_err()
            .to_string()
    };
    let e = err("[otlp]\nendpoint = \"https://c:4318\"\n");
    assert!(
        e.contains("otlp.endpoint = \"https://c:4318\"") && e.contains("plain HTTP only"),
        "{e}"
    );
    let e = err("[otlp]\nendpoint = \"collector:4318\"\n");
    assert!(e.contains("not an http:// URL"), "{e}");
    let e = err("[otlp]\ninterval = \"10ms\"\n");
    assert!(
        e.contains("otlp.interval") && e.contains("100ms and 1h"),
        "{e}"
    );
    let e = err("[otlp]\ntimeout = \"2m\"\n");
    assert!(e.contains("otlp.timeout"), "{e}");
    let e = err("[otlp]\nheaders = { \"bad name\" = \"x\" }\n");
    assert!(e.contains("not an HTTP header name"), "{e}");
    let e = err("[otlp]\nheaders = { a = \"x\\ny\" }\n");
    assert!(e.contains("control character"), "{e}");
}

#[test]
fn otlp_changes_wait_for_a_restart() {
    let old = Config::default();
    let mut new = Config::default();
    new.otlp.endpoint = "http://c:4318".into();
    let r = old.reload_from(&new);
    assert_eq!(r.pending, ["otlp"]);
    assert!(r.changed.is_empty());
    assert_eq!(r.next.otlp.endpoint, "");
}
