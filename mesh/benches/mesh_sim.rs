//! The mesh at scale, by simulation (docs/scale-out.md, "Simulation"): CLUSTERS serving
//! clusters of mixed weights and KEYS object keys, streamed (never stored).
//!
//! ```sh
//! cargo bench -p crescent-mesh --bench mesh_sim [-- KEYS [CLUSTERS [THREADS]]]
//! ```
//!
//! Defaults: 100,000,000 keys, 1,000 clusters, every available core. Reports
//!
//! - balance: keys per unit of weight of each cluster against the mean (max/mean, min/mean);
//! - a join (a cluster of the mean weight) and a leave (the first cluster stops serving):
//!   keys moved against the ideal (the newcomer's, the leaver's weight share), and keys moved
//!   anywhere else (must be 0);
//! - routing cost: ns per route on one thread for 10, 100 and CLUSTERS clusters, with the
//!   logarithm-free bound and scoring every cluster, and the cost of building and hashing a
//!   key.
//!
//! Every key is routed under all three memberships in full (no shortcut through the
//! rendezvous property being measured); a sample is also routed by scoring every cluster and
//! must agree.

use std::time::Instant;

use crescent_mesh::{ClusterEntry, ClusterState, Membership, RouteKey, RouteTable};

/// Weights of the simulated fleet: four hardware generations, a few of each size.
const WEIGHT_CLASSES: [f64; 5] = [1.0, 2.0, 3.0, 4.0, 8.0];

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let arg = |i: usize, default: usize| -> usize {
        args.get(i).map_or(default, |s| {
            s.replace('_', "").parse().expect("a whole number")
        })
    };
    let keys = arg(0, 100_000_000) as u64;
    let clusters = arg(1, 1_000);
    let threads = arg(
        2,
        std::thread::available_parallelism().map_or(1, |n| n.get()),
    );
    println!("mesh simulation: {keys} keys, {clusters} clusters, {threads} threads");

    let base = fleet(clusters);
    let joined = with_joiner(&base);
    let left = with_leaver(&base);
    let started = Instant::now();
    let tally = simulate(keys, threads, &base, &joined, &left);
    let elapsed = started.elapsed();
    report(&base, &joined, &left, &tally, keys);
    println!(
        "simulation: {:.1} s for {keys} keys x 3 memberships on {threads} threads",
        elapsed.as_secs_f64()
    );
    routing_cost(clusters);
}

/// `n` serving clusters, weights cycling through the classes in a scattered order.
fn fleet(n: usize) -> Membership {
    let clusters = (0..n)
        .map(|i| ClusterEntry {
            name: format!("cluster-{i:04}"),
            leader: Some(format!("10.0.{}.{}:7480", i / 250, i % 250)),
            weight: WEIGHT_CLASSES[(i * 7 + i / 5) % WEIGHT_CLASSES.len()],
            state: ClusterState::Serving,
        })
        .collect();
    Membership::new("sim", clusters)
}

fn mean_weight(m: &Membership) -> f64 {
    m.clusters.iter().map(|c| c.weight).sum::<f64>() / m.clusters.len() as f64
}

fn with_joiner(base: &Membership) -> Membership {
    let mut m = base.clone();
    m.generation += 1;
    m.clusters.push(ClusterEntry {
        name: "joiner".into(),
        leader: None,
        weight: mean_weight(base),
        state: ClusterState::Serving,
    });
    m
}

fn with_leaver(base: &Membership) -> Membership {
    let mut m = base.clone();
    m.generation += 1;
    m.clusters[0].state = ClusterState::Draining;
    m
}

/// What one pass over the keys counts.
#[derive(Default)]
struct Tally {
    /// Keys won by each serving cluster of the base membership (name order).
    per_cluster: Vec<u64>,
    join_moved: u64,
    /// Keys whose authority changed on the join to anything but the joiner.
    join_misplaced: u64,
    leave_moved: u64,
    /// Keys whose authority changed on the leave though the leaver did not hold them.
    leave_misplaced: u64,
    /// Sampled keys routed by scoring every cluster that disagreed with the bounded route.
    exhaustive_disagreed: u64,
    sampled: u64,
}

impl Tally {
    fn merge(&mut self, o: Tally) {
        if self.per_cluster.is_empty() {
            self.per_cluster = vec![0; o.per_cluster.len()];
        }
        for (a, b) in self.per_cluster.iter_mut().zip(&o.per_cluster) {
            *a += b;
        }
        self.join_moved += o.join_moved;
        self.join_misplaced += o.join_misplaced;
        self.leave_moved += o.leave_moved;
        self.leave_misplaced += o.leave_misplaced;
        self.exhaustive_disagreed += o.exhaustive_disagreed;
        self.sampled += o.sampled;
    }
}

fn key(i: u64) -> RouteKey {
    let tenant = ["default", "acme", "globex", "initech"][(i % 4) as usize];
    RouteKey::object(
        tenant,
        None,
        format!("model-7b/layer-{}/kv-{i}", i % 80).as_bytes(),
    )
}

fn simulate(
    keys: u64,
    threads: usize,
    base: &Membership,
    joined: &Membership,
    left: &Membership,
) -> Tally {
    let (base, joined, left) = (
        RouteTable::new(base),
        RouteTable::new(joined),
        RouteTable::new(left),
    );
    let leaver = base.name(0).to_string();
    let threads = threads.max(1) as u64;
    let mut total = Tally::default();
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (base, joined, left, leaver) = (&base, &joined, &left, &leaver);
                s.spawn(move || {
                    let range = (keys * t / threads)..(keys * (t + 1) / threads);
                    pass(range, base, joined, left, leaver)
                })
            })
            .collect();
        for w in workers {
            total.merge(w.join().expect("simulation thread"));
        }
    });
    total
}

fn pass(
    range: std::ops::Range<u64>,
    base: &RouteTable,
    joined: &RouteTable,
    left: &RouteTable,
    leaver: &str,
) -> Tally {
    let mut t = Tally {
        per_cluster: vec![0; base.len()],
        ..Tally::default()
    };
    for i in range {
        let k = key(i);
        let owner = base.route_index(k).expect("serving clusters");
        t.per_cluster[owner] += 1;
        let owner = base.name(owner);
        let after_join = joined.route(k).expect("serving clusters");
        if after_join != owner {
            t.join_moved += 1;
            t.join_misplaced += u64::from(after_join != "joiner");
        }
        let after_leave = left.route(k).expect("serving clusters");
        if after_leave != owner {
            t.leave_moved += 1;
            t.leave_misplaced += u64::from(owner != leaver);
        }
        if i % 1024 == 0 {
            t.sampled += 1;
            t.exhaustive_disagreed += u64::from(base.route_exhaustive(k) != Ok(owner));
        }
    }
    t
}

fn report(base: &Membership, joined: &Membership, left: &Membership, t: &Tally, keys: u64) {
    let table = RouteTable::new(base);
    let total_weight: f64 = base.clusters.iter().map(|c| c.weight).sum();
    let per_unit = keys as f64 / total_weight;
    let (mut max, mut min) = (0f64, f64::MAX);
    for (i, n) in t.per_cluster.iter().enumerate() {
        let load = *n as f64 / table.weight(i) / per_unit;
        max = max.max(load);
        min = min.min(load);
    }
    println!(
        "balance: keys per unit weight, max/mean {max:.4}, min/mean {min:.4} (mean {per_unit:.0} keys per unit, weights {WEIGHT_CLASSES:?})"
    );
    let w_join = joined.clusters.last().map_or(0.0, |c| c.weight);
    let ideal_join = w_join / (total_weight + w_join);
    let moved = t.join_moved as f64 / keys as f64;
    println!(
        "join (weight {w_join:.2}): moved {moved:.6} of keys, ideal {ideal_join:.6} (ratio {:.4}), moved elsewhere {}",
        moved / ideal_join,
        t.join_misplaced
    );
    let w_leave = left.clusters[0].weight;
    let ideal_leave = w_leave / total_weight;
    let moved = t.leave_moved as f64 / keys as f64;
    println!(
        "leave (weight {w_leave:.2}): moved {moved:.6} of keys, ideal {ideal_leave:.6} (ratio {:.4}), moved from others {}",
        moved / ideal_leave,
        t.leave_misplaced
    );
    println!(
        "bounded route against scoring every cluster: {} of {} sampled keys disagreed",
        t.exhaustive_disagreed, t.sampled
    );
}

/// ns per route on one thread, bounded and exhaustive, for growing fleets.
fn routing_cost(clusters: usize) {
    let mut sizes = vec![10, 100, clusters];
    sizes.sort_unstable();
    sizes.dedup();
    for n in sizes {
        let table = RouteTable::new(&fleet(n));
        let keys: Vec<RouteKey> = (0..20_000u64).map(key).collect();
        let rounds = (2_000_000 / n).clamp(1, 100);
        let bounded = time_routes(&keys, rounds, |k| table.route_index(k).unwrap());
        let exhaustive = time_routes(&keys, rounds.div_ceil(4), |k| {
            table.route_exhaustive(k).unwrap().len()
        });
        let started = Instant::now();
        let mut sink = 0u64;
        for i in 0..1_000_000u64 {
            sink = sink.wrapping_add(key(i).hash());
        }
        let hashing = started.elapsed().as_nanos() as f64 / 1e6;
        std::hint::black_box(sink);
        println!(
            "routing cost, {n} clusters: {bounded:.0} ns per route (bound), {exhaustive:.0} ns scoring every cluster; building and hashing the key {hashing:.0} ns"
        );
    }
}

fn time_routes(keys: &[RouteKey], rounds: usize, route: impl Fn(RouteKey) -> usize) -> f64 {
    let started = Instant::now();
    let mut sink = 0usize;
    for _ in 0..rounds {
        for k in keys {
            sink = sink.wrapping_add(route(*k));
        }
    }
    std::hint::black_box(sink);
    started.elapsed().as_nanos() as f64 / (rounds * keys.len()) as f64
}
