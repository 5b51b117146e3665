//! Request checks done before any RDMA resource is touched, so a bad request
//! fails fast with InvalidArgument naming the field and the allowed range.
//!
//! This module owns the checks every workload shares: sizes against the
//! node's memory, counts, durations, small fields, and what the workload's
//! catalogue entry allows (the faults it can catch, several QPs or one).
//! The shared limits are the catalogue's; a workload adds its own checks
//! (the memory it registers, its size bounds) in its implementation. It
//! must not know any workload by name: the registry pairs names with code.

use agent_proto::v1::{Fault, WorkloadParams};
use workload_catalogue::limits::{
    DEFAULT_MAX_SIZE, MAX_BULK_TOTAL, MAX_CONNECT_DELAY_MS, MAX_DURATION_S, MAX_ITERATIONS, MAX_QPS, MAX_TIMEOUT_MS,
    MAX_TRACE_EVENTS,
};
use workload_catalogue::Opt;

/// A session may register at most this fraction of MemAvailable.
const MEM_AVAILABLE_FRACTION: u64 = 4;

/// A workload's own checks, after the shared ones: the memory it registers
/// for a request, its size bounds, field combinations it cannot run.
pub type OwnCheck = fn(&WorkloadParams, &Limits) -> Result<(), ValidationError>;

/// A workload with no checks of its own.
pub fn no_own_checks(_: &WorkloadParams, _: &Limits) -> Result<(), ValidationError> {
    Ok(())
}

/// The bytes a bulk transfer moves: `total`, or `size` x `iterations` when
/// `total` is 0 (saturating: an overflow is refused as out of range).
pub fn bulk_total(params: &WorkloadParams) -> u64 {
    if params.total > 0 {
        params.total
    } else {
        params.size.saturating_mul(params.iterations)
    }
}

fn check_fault(params: &WorkloadParams, entry: &workload_catalogue::Workload) -> Result<(), ValidationError> {
    let fault = Fault::try_from(params.fault).map_err(|_| ValidationError::FieldOutOfRange {
        field: "fault",
        value: i128::from(params.fault),
        range: "0 (none), 1 (skip) or 2 (corrupt)",
    })?;
    match workload_catalogue::Fault::try_from(fault) {
        Err(()) => Ok(()),
        Ok(f) if entry.injects(f) => Ok(()),
        Ok(f) => Err(ValidationError::FaultNotInjectable {
            workload: params.workload.clone(),
            fault: f.label(),
            supported: entry.fault_labels(),
        }),
    }
}

/// The {addr, rkey} of `params.capability_override`, when set and well formed.
pub fn capability_override(params: &WorkloadParams) -> Option<(u64, u32)> {
    fn number(s: &str) -> Option<u64> {
        match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
            Some(hex) => u64::from_str_radix(hex, 16).ok(),
            None => s.parse().ok(),
        }
    }
    let (addr, rkey) = params.capability_override.trim().split_once(':')?;
    Some((number(addr)?, u32::try_from(number(rkey)?).ok()?))
}

/// Why a request was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ValidationError {
    /// The workload name is not in the registry.
    #[error("unknown workload {name:?}; supported: {supported}")]
    UnknownWorkload {
        /// What the request asked for.
        name: String,
        /// The registry's names, comma separated.
        supported: String,
    },
    /// size outside 1 B .. the limit.
    #[error("size {size} B is out of range: must be 1 B ..= {limit} B ({why})")]
    SizeOutOfRange {
        /// Requested size.
        size: u64,
        /// The effective limit.
        limit: u64,
        /// Where the limit comes from.
        why: String,
    },
    /// iterations above the maximum.
    #[error("iterations {iterations} is out of range: must be 1 ..= {MAX_ITERATIONS} (or 0 with duration_s > 0)")]
    IterationsOutOfRange {
        /// Requested iterations.
        iterations: u64,
    },
    /// A duration that is not a finite number of seconds in range, or none
    /// when the run is timed (iterations 0).
    #[error(
        "duration_s {duration_s} is out of range: must be finite and in [0, 86400] s, and above 0 when iterations is 0"
    )]
    BadDuration {
        /// Requested duration.
        duration_s: f64,
    },
    /// A field with a small integer range was out of it.
    #[error("{field} {value} is out of range: must be {range}")]
    FieldOutOfRange {
        /// The field name as in the proto.
        field: &'static str,
        /// The value given (wide enough for any proto integer).
        value: i128,
        /// Allowed range, human readable.
        range: &'static str,
    },
    /// A required string was empty.
    #[error("{field} must not be empty")]
    Missing {
        /// The field name as in the proto.
        field: &'static str,
    },
    /// A string field that does not parse.
    #[error("{field} {value:?} is malformed: expected {expected}")]
    Malformed {
        /// The field name as in the proto.
        field: &'static str,
        /// The value given.
        value: String,
        /// What it should look like.
        expected: &'static str,
    },
    /// A fault the workload cannot inject (and so could not show caught).
    #[error("{workload} cannot inject fault {fault}; it can inject: {supported}")]
    FaultNotInjectable {
        /// The workload.
        workload: String,
        /// The fault asked for.
        fault: &'static str,
        /// What it can inject.
        supported: String,
    },
    /// Several QPs for a workload that runs on one.
    #[error("num_qps {num_qps} is out of range: must be 0 or 1 for {workload} (several QPs are for {taking})")]
    NotMultiQp {
        /// The workload.
        workload: String,
        /// The QPs asked for.
        num_qps: u32,
        /// The workloads that take several, comma separated.
        taking: String,
    },
    /// A bulk transfer's total outside 1 B .. the limit.
    #[error("total {total} B is out of range: must be 1 B ..= {limit} B ({why}); total 0 means size x iterations")]
    TotalOutOfRange {
        /// The bytes asked for (size x iterations when total was 0).
        total: u64,
        /// The effective limit.
        limit: u64,
        /// Where the limit comes from.
        why: String,
    },
}

/// Limits that depend on the node (so tests can pin them).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest message size.
    pub max_size: u64,
    /// MemAvailable in bytes, if known.
    pub mem_available: Option<u64>,
}

impl Limits {
    /// The node's limits: the default size limit and /proc/meminfo's MemAvailable.
    pub fn of_this_node() -> Limits {
        Limits {
            max_size: DEFAULT_MAX_SIZE,
            mem_available: mem_available_bytes(),
        }
    }

    /// The effective size limit and where it comes from.
    pub fn size_limit(&self) -> (u64, String) {
        match self.mem_available {
            Some(avail) if avail / MEM_AVAILABLE_FRACTION < self.max_size => (
                avail / MEM_AVAILABLE_FRACTION,
                format!("1/{MEM_AVAILABLE_FRACTION} of MemAvailable {avail} B"),
            ),
            _ => (self.max_size, "agent limit".to_string()),
        }
    }
}

impl Limits {
    /// A bulk transfer's total against [`MAX_BULK_TOTAL`] and 1/4 of MemAvailable.
    pub fn check_bulk_total(&self, total: u64) -> Result<(), ValidationError> {
        let (limit, why) = match self.mem_available {
            Some(avail) if avail / MEM_AVAILABLE_FRACTION < MAX_BULK_TOTAL => (
                avail / MEM_AVAILABLE_FRACTION,
                format!("1/{MEM_AVAILABLE_FRACTION} of MemAvailable {avail} B: the server holds all of it"),
            ),
            _ => (MAX_BULK_TOTAL, "agent limit for bulk transfers, 1 GiB".to_string()),
        };
        if total == 0 || total > limit {
            return Err(ValidationError::TotalOutOfRange { total, limit, why });
        }
        Ok(())
    }
}

/// MemAvailable from /proc/meminfo, in bytes.
pub fn mem_available_bytes() -> Option<u64> {
    meminfo_field("MemAvailable:")
}

/// A `/proc/meminfo` field in bytes.
pub fn meminfo_field(name: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with(name))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// `trace.max_events`'s range in words (a unit test keeps it in step with
/// the catalogue's limits).
const TRACE_EVENTS_RANGE: &str = "0 (default 65536) ..= 1048576";

/// Checks `params` for a run of the workload `entry` describes (the
/// registry found it by `params.workload`): the shared checks, what the
/// entry allows, then the workload's own (`own`).
pub fn validate(
    params: &WorkloadParams,
    entry: &workload_catalogue::Workload,
    own: OwnCheck,
    limits: &Limits,
) -> Result<(), ValidationError> {
    let (limit, why) = limits.size_limit();
    let sizes_to_check = if params.all_sizes {
        // A sweep runs 2 B, 4 B, ... up to max_size: below 2 it would run nothing.
        if effective_max_size(params) < 2 {
            return Err(ValidationError::FieldOutOfRange {
                field: "max_size",
                value: i128::from(params.max_size),
                range: "0 (default) or 2 ..= the size limit (a sweep starts at 2 B)",
            });
        }
        [effective_max_size(params)].to_vec()
    } else {
        vec![params.size]
    };
    for size in sizes_to_check {
        if size == 0 || size > limit {
            return Err(ValidationError::SizeOutOfRange { size, limit, why });
        }
    }
    if params.iterations > MAX_ITERATIONS {
        return Err(ValidationError::IterationsOutOfRange {
            iterations: params.iterations,
        });
    }
    // Checked whether or not the run is timed: the workloads turn it into a
    // Duration (which panics on NaN, infinity or 1e20) wherever it is > 0.
    let duration_ok = params.duration_s.is_finite() && (0.0..=MAX_DURATION_S).contains(&params.duration_s);
    if !duration_ok || (params.iterations == 0 && params.duration_s == 0.0) {
        return Err(ValidationError::BadDuration {
            duration_s: params.duration_s,
        });
    }
    if params.timeout_ms > MAX_TIMEOUT_MS {
        return Err(ValidationError::FieldOutOfRange {
            field: "timeout_ms",
            value: i128::from(params.timeout_ms),
            range: "0 (default 30 s) ..= 604800000 (one week)",
        });
    }
    check_range("tx_depth", params.tx_depth as i64, 0, 4096, "0 (default) ..= 4096")?;
    check_range(
        "connect_delay_ms",
        i64::from(params.connect_delay_ms),
        0,
        i64::from(MAX_CONNECT_DELAY_MS),
        "0 ..= 60000 (one minute)",
    )?;
    check_range(
        "cq_moderation",
        params.cq_moderation as i64,
        0,
        4096,
        "0 (default) ..= 4096",
    )?;
    check_range("post_list", params.post_list as i64, 0, 1024, "0 (default) ..= 1024")?;
    check_range("inline_size", params.inline_size as i64, 0, 1024, "0 ..= 1024")?;
    // Several QPs only where the run spreads over them; elsewhere refuse
    // rather than run one and report it as many.
    if entry.takes(Opt::Qps) {
        check_range(
            "num_qps",
            params.num_qps as i64,
            0,
            MAX_QPS as i64,
            "0 (default 1) ..= 16",
        )?;
    } else if params.num_qps > 1 {
        return Err(ValidationError::NotMultiQp {
            workload: params.workload.clone(),
            num_qps: params.num_qps,
            taking: workload_catalogue::taking(Opt::Qps),
        });
    }
    check_range("ib_port", params.ib_port as i64, 0, 255, "0 (default 1) ..= 255")?;
    if !params.capability_override.is_empty() && capability_override(params).is_none() {
        return Err(ValidationError::Malformed {
            field: "capability_override",
            value: params.capability_override.clone(),
            expected: "ADDR:RKEY, each hex with 0x or decimal (e.g. 0x7f3a2c000000:0x1a2b)",
        });
    }
    check_range("gid_index", params.gid_index as i64, -1, 255, "-1 (auto) ..= 255")?;
    check_range(
        "batches",
        params.batches as i64,
        0,
        1_000_000,
        "0 (default) ..= 1000000",
    )?;
    if let Some(trace) = &params.trace {
        // A larger ring is refused, not cut down: the trace would drop events
        // the request asked to keep.
        check_range(
            "trace.max_events",
            i64::from(trace.max_events),
            0,
            i64::from(MAX_TRACE_EVENTS),
            TRACE_EVENTS_RANGE,
        )?;
    }
    check_fault(params, entry)?;
    if params.cq_moderation > 0 && params.tx_depth > 0 && params.cq_moderation > params.tx_depth {
        return Err(ValidationError::FieldOutOfRange {
            field: "cq_moderation",
            value: i128::from(params.cq_moderation),
            range: "<= tx_depth",
        });
    }
    own(params, limits)
}

/// A workload that registers `factor` x `size` bytes: that product against
/// the size limit, refused with the size that would fit and `what` holds it.
pub fn check_footprint(
    params: &WorkloadParams,
    limits: &Limits,
    factor: u64,
    what: &str,
) -> Result<(), ValidationError> {
    let (limit, why) = limits.size_limit();
    if params.size.saturating_mul(factor) > limit {
        return Err(ValidationError::SizeOutOfRange {
            size: params.size,
            limit: limit / factor,
            why: format!("{what}, within {why}"),
        });
    }
    Ok(())
}

/// `value` against `min ..= max`, refused naming `field` and `range`.
pub fn check_range(
    field: &'static str,
    value: i64,
    min: i64,
    max: i64,
    range: &'static str,
) -> Result<(), ValidationError> {
    if value < min || value > max {
        return Err(ValidationError::FieldOutOfRange {
            field,
            value: i128::from(value),
            range,
        });
    }
    Ok(())
}

/// The run's `duration_s` as the timed loops use it (zero when unset). Only
/// for validated params: [`validate`] bounds it to [0, 86400] s, outside of
/// which the conversion panics.
pub fn duration(params: &WorkloadParams) -> std::time::Duration {
    std::time::Duration::from_secs_f64(params.duration_s.max(0.0))
}

/// The largest size of a sweep (max_size, or the default when unset).
pub fn effective_max_size(params: &WorkloadParams) -> u64 {
    workload_catalogue::limits::sweep_max(params.max_size)
}
