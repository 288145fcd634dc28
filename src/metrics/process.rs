//! The process's own metrics: CPU time, memory, file descriptors and threads, read from
//! `/proc` when scraped rather than kept up to date.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Unit;

/// The process's own CPU time, memory, file descriptors and threads, read from `/proc` at each
/// scrape, under the unprefixed `process_*` names Prometheus clients share. A value `/proc` does
/// not give is left out; elsewhere than Linux there are none.
#[derive(Debug, Default)]
pub struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(p) = ProcessSample::read() else {
            return Ok(());
        };
        let mut put = |name: &str, help: &str, unit: Option<Unit>, metric: &dyn EncodeMetric| {
            let described =
                encoder.encode_descriptor(name, help, unit.as_ref(), metric.metric_type())?;
            metric.encode(described)
        };
        put(
            "process_cpu",
            "User and system CPU time spent",
            Some(Unit::Seconds),
            &ConstCounter::new(p.cpu_seconds),
        )?;
        put(
            "process_resident_memory",
            "Resident memory size",
            Some(Unit::Bytes),
            &ConstGauge::new(p.resident_bytes),
        )?;
        put(
            "process_virtual_memory",
            "Virtual memory size",
            Some(Unit::Bytes),
            &ConstGauge::new(p.virtual_bytes),
        )?;
        put(
            "process_threads",
            "OS threads in the process",
            None,
            &ConstGauge::new(p.threads),
        )?;
        if let Some(start) = p.start_time {
            put(
                "process_start_time",
                "Start time of the process since the Unix epoch",
                Some(Unit::Seconds),
                &ConstGauge::new(start),
            )?;
        }
        if let Some(open) = p.open_fds {
            put(
                "process_open_fds",
                "Open file descriptors",
                None,
                &ConstGauge::new(open),
            )?;
        }
        if let Some(max) = p.max_fds {
            put(
                "process_max_fds",
                "Most file descriptors the process may open (its soft limit)",
                None,
                &ConstGauge::new(max),
            )?;
        }
        Ok(())
    }
}

/// One reading of `/proc/self`.
#[derive(Debug)]
struct ProcessSample {
    cpu_seconds: f64,
    resident_bytes: u64,
    virtual_bytes: u64,
    threads: i64,
    start_time: Option<f64>,
    open_fds: Option<u64>,
    max_fds: Option<u64>,
}

impl ProcessSample {
    #[cfg(target_os = "linux")]
    fn read() -> Option<ProcessSample> {
        use procfs::process::{LimitValue, Process};
        let me = Process::myself().ok()?;
        let stat = me.stat().ok()?;
        let ticks = procfs::ticks_per_second() as f64;
        Some(ProcessSample {
            cpu_seconds: (stat.utime + stat.stime) as f64 / ticks,
            resident_bytes: stat.rss * procfs::page_size(),
            virtual_bytes: stat.vsize,
            threads: stat.num_threads,
            start_time: procfs::boot_time_secs()
                .ok()
                .map(|boot| boot as f64 + stat.starttime as f64 / ticks),
            open_fds: me.fd_count().ok().map(|n| n as u64),
            max_fds: me
                .limits()
                .ok()
                .and_then(|l| match l.max_open_files.soft_limit {
                    LimitValue::Value(n) => Some(n),
                    LimitValue::Unlimited => None,
                }),
        })
    }

    #[cfg(not(target_os = "linux"))]
    fn read() -> Option<ProcessSample> {
        None
    }
}
