//! Minimal foreground server over `vodkit-server` for benchmarks when the full `vodkit`
//! binary is not built: `serve ROOT ADDR [THREADS]`. Same library, same defaults as
//! `vodkit serve --root ROOT --listen ADDR --threads THREADS`.

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: serve ROOT ADDR [THREADS]");
        std::process::exit(2);
    }
    let mut config = vodkit_server::ServerConfig::new(&args[1]);
    config.listen = match args[2].parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("serve: ADDR {:?}: {e}", args[2]);
            std::process::exit(2);
        }
    };
    config.worker_threads = args.get(3).and_then(|t| t.parse().ok()).unwrap_or(0);
    let result =
        vodkit_server::run_until_signal(config, |addr, _| eprintln!("serve: listening on {addr}"));
    if let Err(e) = result {
        eprintln!("serve: {e}");
        std::process::exit(1);
    }
}
