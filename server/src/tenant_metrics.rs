//! Per-tenant quota gauges (docs/tenants.md, "Metrics"), read from the directory's tenant
//! ledger at scrape time. The `tenant` label is bounded: a tenant with a policy gets its own
//! series, every other tenant (also one held to the default limits) is summed into
//! `tenant="other"`.

use prometheus::{IntGaugeVec, Opts, Registry};

use crescent_store::TenantFigures;

/// The label every tenant without a limit is summed into.
pub const OTHER: &str = "other";

pub struct TenantMetrics {
    used_bytes: IntGaugeVec,
    used_objects: IntGaugeVec,
    pending_bytes: IntGaugeVec,
    pending_puts: IntGaugeVec,
    max_bytes: IntGaugeVec,
    max_objects: IntGaugeVec,
}

fn gauge(registry: &Registry, name: &str, help: &str) -> prometheus::Result<IntGaugeVec> {
    let g = IntGaugeVec::new(Opts::new(name, help), &["tenant"])?;
    registry.register(Box::new(g.clone()))?;
    Ok(g)
}

fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl TenantMetrics {
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        Ok(Self {
            used_bytes: gauge(
                registry,
                "crescent_tenant_used_bytes",
                "Value bytes of the tenant's complete objects",
            )?,
            used_objects: gauge(
                registry,
                "crescent_tenant_used_objects",
                "The tenant's complete objects",
            )?,
            pending_bytes: gauge(
                registry,
                "crescent_tenant_pending_bytes",
                "Bytes reserved by the tenant's puts in progress",
            )?,
            pending_puts: gauge(
                registry,
                "crescent_tenant_pending_puts",
                "The tenant's puts in progress",
            )?,
            max_bytes: gauge(
                registry,
                "crescent_tenant_max_bytes",
                "The tenant's byte limit (absent: unlimited)",
            )?,
            max_objects: gauge(
                registry,
                "crescent_tenant_max_objects",
                "The tenant's object limit (absent: unlimited)",
            )?,
        })
    }

    /// Sets every gauge from `tenants` (the ledger's figures, by name).
    pub fn refresh(&self, tenants: &[TenantFigures]) {
        for g in self.all() {
            g.reset();
        }
        let mut other = TenantFigures::default();
        for t in tenants {
            // Only tenants with a policy: the default limits may apply to any number.
            if !t.has_policy {
                other.used_bytes += t.used_bytes;
                other.used_objects += t.used_objects;
                other.pending_bytes += t.pending_bytes;
                other.pending_puts += t.pending_puts;
                continue;
            }
            self.set(&t.tenant, t);
            if let Some(max) = t.max_bytes {
                self.max_bytes
                    .with_label_values(&[&t.tenant])
                    .set(clamp(max));
            }
            if let Some(max) = t.max_objects {
                self.max_objects
                    .with_label_values(&[&t.tenant])
                    .set(clamp(max));
            }
        }
        self.set(OTHER, &other);
    }

    fn set(&self, label: &str, t: &TenantFigures) {
        let set = |g: &IntGaugeVec, v: u64| g.with_label_values(&[label]).set(clamp(v));
        set(&self.used_bytes, t.used_bytes);
        set(&self.used_objects, t.used_objects);
        set(&self.pending_bytes, t.pending_bytes);
        set(&self.pending_puts, t.pending_puts);
    }

    fn all(&self) -> [&IntGaugeVec; 6] {
        [
            &self.used_bytes,
            &self.used_objects,
            &self.pending_bytes,
            &self.pending_puts,
            &self.max_bytes,
            &self.max_objects,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(tenant: &str, used: u64, max: Option<u64>) -> TenantFigures {
        TenantFigures {
            tenant: tenant.into(),
            used_bytes: used,
            used_objects: 1,
            max_bytes: max,
            has_policy: max.is_some(),
            ..TenantFigures::default()
        }
    }

    #[test]
    fn tenants_without_a_limit_are_summed_into_other() {
        let registry = Registry::new();
        let m = TenantMetrics::register(&registry).unwrap();
        m.refresh(&[
            figures("a", 10, Some(100)),
            figures("b", 20, None),
            figures("c", 30, None),
        ]);
        let used = |t: &str| m.used_bytes.with_label_values(&[t]).get();
        assert_eq!((used("a"), used(OTHER)), (10, 50));
        assert_eq!(m.max_bytes.with_label_values(&["a"]).get(), 100);
        // A tenant whose limit went away leaves no series behind.
        m.refresh(&[figures("a", 10, None)]);
        let families = registry.gather();
        let used_family = families
            .iter()
            .find(|f| f.name() == "crescent_tenant_used_bytes")
            .unwrap();
        assert_eq!(used_family.get_metric().len(), 1);
    }
}
