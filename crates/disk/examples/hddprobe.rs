//! Manual probe: bring a device up in-process, run the read benchmark, print counters.
use std::path::Path;
fn main() {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or("/var/tmp/hddprobe".into());
    let dir = Path::new(&dir);
    let mut cfg =
        vodkit_disk::testbed::Config::new("wd-red", 4 << 30, dir.join("img"), dir.join("mnt"));
    cfg.state_root = dir.join("state");
    let bed = vodkit_disk::testbed::Testbed::up(&cfg).unwrap();
    let st = bed.state().clone();
    let spec = vodkit_disk::model::preset("wd-red").unwrap();
    let opts = vodkit_disk::devbench::BenchOptions {
        sequential_bytes: 96 << 20,
        random_2m_reads: 10,
        random_128k_reads: 10,
        ..Default::default()
    };
    let r = vodkit_disk::devbench::run(
        &Path::new("/dev").join(&st.loop_device),
        st.size,
        &spec,
        &opts,
    )
    .unwrap();
    for row in r.rows {
        eprintln!("{} {:.1} model {:.1}", row.test, row.mb_s, row.model_mb_s);
    }
    eprintln!("{:?}", vodkit_disk::testbed::counters(&st).unwrap());
    let b = cfg.mount.join("b.bin");
    std::fs::write(&b, vec![7u8; 8 << 20]).unwrap();
    std::fs::File::open(&b).unwrap().sync_all().unwrap();
    let ex = vodkit_disk::testbed::file_extents(&b).unwrap();
    eprintln!("extents {ex:?}");
    for x in &ex {
        vodkit_disk::testbed::control(
            &st,
            &format!(
                "eio-range {} {}",
                x.physical / 512,
                (x.physical + x.length).div_ceil(512)
            ),
        )
        .unwrap();
    }
    vodkit_disk::testbed::system::drop_caches().unwrap();
    let r = std::fs::read(&b);
    eprintln!("read: {:?}", r.map(|v| v.len()));
    eprintln!("{:?}", vodkit_disk::testbed::counters(&st).unwrap());
    bed.down().unwrap();
}
