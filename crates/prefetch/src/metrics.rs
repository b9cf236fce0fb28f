//! Prometheus metrics for the engine (`prometheus-client`), read from a [`Stats`]
//! snapshot at every scrape.
//!
//! Names (all prefixed `vodkit_prefetch_`; counters get `_total` in the text format):
//! `requests`, `hits`, `misses`, `requested_bytes`, `memory_bytes`, `missed_bytes`,
//! `reads`, `read_bytes`, `read_errors`, `joined`, `disk_bytes`, `prefetched_bytes`,
//! `prefetch_used_bytes`, `prefetch_evicted_bytes`, `prefetch_evictions`,
//! `wasted_bytes`, `eviction_time_seconds` (counters); `eviction_time_mean_seconds`,
//! `disk_ms_per_128k`, `device_busy_fraction{device}`, `device_queue_depth{device}`,
//! `size_bytes{bitrate_kbps}` (gauges); `device_busy_seconds{device}`,
//! `device_late_reads{device}` (counters).
//! With a memory manager: `vodkit_memory_*`. In `direct` mode, the buffer pool:
//! `vodkit_direct_pool_bytes`, `_pool_capacity_bytes`, `_chunks`, `_pooled_chunks`
//! (gauges); `_reads`, `_fallback_reads`, `_read_bytes`, `_released_bytes`,
//! `_evicted_bytes`, `_room_waits` (counters).

use crate::engine::Engine;
use crate::stats::{DeviceStats, Stats};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use std::sync::Arc;

/// Registers the engine's metrics in `registry`.
pub fn register(registry: &mut Registry, engine: Arc<Engine>) {
    registry.register_collector(Box::new(EngineCollector(engine)));
}

#[derive(Debug)]
struct EngineCollector(Arc<Engine>);

impl Collector for EngineCollector {
    fn encode(&self, encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        encode_stats(&self.0.stats(), encoder)
    }
}

/// Encodes one counter (also for other crates' collectors, such as the server's live origin).
pub fn counter(enc: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> std::fmt::Result {
    let m = ConstCounter::new(v);
    m.encode(enc.encode_descriptor(name, help, None, m.metric_type())?)
}

fn counter_f(enc: &mut DescriptorEncoder, name: &str, help: &str, v: f64) -> std::fmt::Result {
    let m = ConstCounter::new(v);
    m.encode(enc.encode_descriptor(name, help, None, m.metric_type())?)
}

/// Encodes one gauge.
pub fn gauge(enc: &mut DescriptorEncoder, name: &str, help: &str, v: f64) -> std::fmt::Result {
    let m = ConstGauge::new(v);
    m.encode(enc.encode_descriptor(name, help, None, m.metric_type())?)
}

/// A family with one label: a metric made by `make` (a gauge or a counter) for each
/// `(label value, value)`; nothing when there are none.
fn family<N: Copy, M: EncodeMetric>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    label: &'static str,
    values: &[(String, N)],
    make: impl Fn(N) -> M,
) -> std::fmt::Result {
    let Some(&(_, first)) = values.first() else {
        return Ok(());
    };
    let mut m = enc.encode_descriptor(name, help, None, make(first).metric_type())?;
    for (l, v) in values {
        let labels = [(label, l.clone())];
        make(*v).encode(m.encode_family(&labels)?)?;
    }
    Ok(())
}

/// One figure of each device, labelled with its name.
fn per_device<N>(s: &Stats, v: impl Fn(&DeviceStats) -> N) -> Vec<(String, N)> {
    s.devices.iter().map(|d| (d.device.clone(), v(d))).collect()
}

/// Encodes a snapshot (also usable without an [`Engine`], e.g. by the simulator).
pub fn encode_stats(s: &Stats, mut enc: DescriptorEncoder) -> std::fmt::Result {
    let e = &mut enc;
    let p = &s.prefetch;
    counter(
        e,
        "vodkit_prefetch_requests",
        "Requests checked for residency",
        s.requests,
    )?;
    counter(
        e,
        "vodkit_prefetch_hits",
        "Requests entirely in memory",
        s.hits,
    )?;
    counter(
        e,
        "vodkit_prefetch_misses",
        "Requests with bytes missing from memory",
        s.misses,
    )?;
    counter(
        e,
        "vodkit_prefetch_requested_bytes",
        "Bytes requested",
        s.requested_bytes,
    )?;
    counter(
        e,
        "vodkit_prefetch_memory_bytes",
        "Requested bytes served from memory",
        s.memory_bytes,
    )?;
    counter(
        e,
        "vodkit_prefetch_missed_bytes",
        "Requested bytes not in memory",
        s.missed_bytes,
    )?;
    counter(e, "vodkit_prefetch_reads", "Reads issued", s.reads)?;
    counter(
        e,
        "vodkit_prefetch_read_bytes",
        "Bytes covered by reads",
        s.read_bytes,
    )?;
    counter(
        e,
        "vodkit_prefetch_read_errors",
        "Reads that failed",
        s.read_errors,
    )?;
    counter(
        e,
        "vodkit_prefetch_disk_bytes",
        "Bytes fetched from disk",
        s.disk_bytes,
    )?;
    counter(
        e,
        "vodkit_prefetch_prefetched_bytes",
        "Bytes read beyond requests",
        p.prefetched_bytes,
    )?;
    counter(
        e,
        "vodkit_prefetch_prefetch_used_bytes",
        "Prefetched bytes later requested",
        p.used_bytes,
    )?;
    counter(
        e,
        "vodkit_prefetch_prefetch_evicted_bytes",
        "Prefetched bytes evicted before they were requested",
        p.evicted_bytes,
    )?;
    counter(
        e,
        "vodkit_prefetch_prefetch_evictions",
        "Prefetch evictions found",
        p.evictions,
    )?;
    counter(
        e,
        "vodkit_prefetch_wasted_bytes",
        "Prefetched bytes never requested",
        p.wasted_bytes,
    )?;
    counter_f(
        e,
        "vodkit_prefetch_eviction_time_seconds",
        "Sum of times from prefetch to eviction",
        p.eviction_time_s,
    )?;
    gauge(
        e,
        "vodkit_prefetch_eviction_time_mean_seconds",
        "Mean time from prefetch to eviction",
        s.eviction_time_mean_s,
    )?;
    gauge(
        e,
        "vodkit_prefetch_disk_ms_per_128k",
        "Device busy milliseconds per 128 KiB from disk",
        s.disk_ms_per_128k,
    )?;
    family(
        e,
        "vodkit_prefetch_device_busy_fraction",
        "Recent fraction of time the device was reading",
        "device",
        &per_device(s, |d| d.recent_busy_fraction),
        ConstGauge::new,
    )?;
    family(
        e,
        "vodkit_prefetch_device_queue_depth",
        "Reads queued or running",
        "device",
        &per_device(s, |d| d.queue_depth as f64),
        ConstGauge::new,
    )?;
    family(
        e,
        "vodkit_prefetch_device_busy_seconds",
        "Seconds the device had a read in progress",
        "device",
        &per_device(s, |d| d.busy_s),
        ConstCounter::new,
    )?;
    family(
        e,
        "vodkit_prefetch_device_late_reads",
        "Reads that finished after the client waiting for them ran dry",
        "device",
        &per_device(s, |d| d.late_reads),
        ConstCounter::new,
    )?;
    let sizes: Vec<_> = s
        .policy
        .classes
        .iter()
        .map(|c| (c.bitrate_kbps.to_string(), c.bytes as f64))
        .collect();
    family(
        e,
        "vodkit_prefetch_size_bytes",
        "Current prefetch size per bit-rate class",
        "bitrate_kbps",
        &sizes,
        ConstGauge::new,
    )?;
    if let Some(m) = &s.memory {
        encode_memory(m, e)?;
    }
    if let Some(d) = &s.direct {
        encode_direct(d, e)?;
    }
    Ok(())
}

/// The `direct` buffer pool's levels (gauges) and totals (counters).
fn encode_direct(d: &crate::direct::DirectStats, e: &mut DescriptorEncoder) -> std::fmt::Result {
    for (name, help, v) in [
        (
            "vodkit_direct_pool_bytes",
            "Bytes allocated to direct buffer pool chunks",
            d.pool_bytes,
        ),
        (
            "vodkit_direct_pool_capacity_bytes",
            "Most bytes the direct buffer pool may allocate",
            d.capacity_bytes,
        ),
        ("vodkit_direct_chunks", "Chunks allocated", d.chunks),
        (
            "vodkit_direct_pooled_chunks",
            "Chunks held by the pool (the rest only by connections)",
            d.pooled_chunks,
        ),
    ] {
        gauge(e, name, help, v as f64)?;
    }
    for (name, help, v) in [
        (
            "vodkit_direct_reads",
            "Reads made with O_DIRECT",
            d.direct_reads,
        ),
        (
            "vodkit_direct_fallback_reads",
            "Reads made with buffered pread because O_DIRECT was refused",
            d.fallback_reads,
        ),
        (
            "vodkit_direct_read_bytes",
            "Bytes read into the pool",
            d.read_bytes,
        ),
        (
            "vodkit_direct_released_bytes",
            "Chunk bytes freed because the memory manager dropped them",
            d.released_bytes,
        ),
        (
            "vodkit_direct_evicted_bytes",
            "Chunk bytes evicted to make room for a read",
            d.evicted_bytes,
        ),
        (
            "vodkit_direct_room_waits",
            "Reads that waited for connections to free pool memory",
            d.room_waits,
        ),
    ] {
        counter(e, name, help, v)?;
    }
    Ok(())
}

/// The memory manager's levels (gauges) and totals (counters).
fn encode_memory(m: &crate::memory::MemoryTotals, e: &mut DescriptorEncoder) -> std::fmt::Result {
    for (name, help, v) in [
        (
            "vodkit_memory_budget_bytes",
            "Memory budget for file data",
            m.budget_bytes,
        ),
        (
            "vodkit_memory_reserve_bytes",
            "Part of the budget kept free",
            m.reserve_bytes,
        ),
        ("vodkit_memory_streams", "Active streams", m.streams),
        (
            "vodkit_memory_unconsumed_bytes",
            "Prefetched bytes not yet sent",
            m.unconsumed_bytes,
        ),
        (
            "vodkit_memory_kept_interval_bytes",
            "Sent bytes kept for a following stream",
            m.kept_bytes,
        ),
        (
            "vodkit_memory_consumed_cached_bytes",
            "Sent bytes still cached, dropped first when room is needed",
            m.consumed_cached_bytes,
        ),
        (
            "vodkit_memory_horizon_bytes",
            "Largest admitted interval between two streams of a file",
            m.horizon_bytes,
        ),
        (
            "vodkit_memory_predicted_horizon_bytes",
            "Largest admitted interval predicted behind a file's last stream",
            m.predicted_horizon_bytes,
        ),
        (
            "vodkit_memory_prefetch_pool_bytes",
            "Budget available to prefetch",
            m.prefetch_pool_bytes,
        ),
        (
            "vodkit_memory_other_bytes",
            "Budget held by the rest of the server (the live window)",
            m.other_bytes,
        ),
    ] {
        gauge(e, name, help, v as f64)?;
    }
    for (name, help, v) in [
        (
            "vodkit_memory_dropped_bytes",
            "Bytes dropped from the page cache by the manager",
            m.dropped_bytes,
        ),
        ("vodkit_memory_drops", "Drop calls", m.drops),
        (
            "vodkit_memory_interval_hit_bytes",
            "Bytes served from kept intervals",
            m.interval_hit_bytes,
        ),
        (
            "vodkit_memory_capped_reads",
            "Reads whose prefetch the budget shortened",
            m.capped_reads,
        ),
    ] {
        counter(e, name, help, v)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{ClassSize, PolicyState};

    #[derive(Debug)]
    struct Fixed(Stats);
    impl Collector for Fixed {
        fn encode(&self, encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
            encode_stats(&self.0, encoder)
        }
    }

    #[test]
    fn snapshot_encodes_as_prometheus_text() {
        let mut s = Stats {
            requests: 10,
            requested_bytes: 5_000,
            disk_bytes: 131_072,
            disk_time_s: 0.01,
            devices: vec![DeviceStats {
                device: "vda".into(),
                recent_busy_fraction: 0.5,
                busy_s: 3.0,
                ..Default::default()
            }],
            policy: PolicyState {
                policy: "sqrt".into(),
                classes: vec![ClassSize {
                    bitrate_kbps: 419,
                    bytes: 3_000_000,
                }],
                ..Default::default()
            },
            ..Default::default()
        };
        s.prefetch.evictions = 2;
        s.prefetch.eviction_time_s = 120.0;
        s.direct = Some(crate::direct::DirectStats {
            pool_bytes: 1 << 20,
            capacity_bytes: 8 << 20,
            fallback_reads: 3,
            ..Default::default()
        });
        s.derive();
        let mut reg = Registry::default();
        reg.register_collector(Box::new(Fixed(s)));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &reg).unwrap();
        for needle in [
            "vodkit_prefetch_requests_total 10",
            "vodkit_prefetch_requested_bytes_total 5000",
            "vodkit_prefetch_prefetch_evictions_total 2",
            "vodkit_prefetch_eviction_time_mean_seconds 60",
            "vodkit_prefetch_disk_ms_per_128k 10",
            "vodkit_prefetch_device_busy_fraction{device=\"vda\"} 0.5",
            "vodkit_prefetch_size_bytes{bitrate_kbps=\"419\"} 3000000",
            "vodkit_direct_pool_bytes 1048576",
            "vodkit_direct_pool_capacity_bytes 8388608",
            "vodkit_direct_fallback_reads_total 3",
        ] {
            assert!(out.contains(needle), "missing `{needle}` in\n{out}");
        }
    }
}
