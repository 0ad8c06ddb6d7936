//! `POST /v1/mesh/quota/exchange` (`peer` or admin): one cluster of a mesh tells a tenant's
//! home what it holds of the tenant's quota and asks for room; the home records and answers
//! (docs/tenants.md, "Quota across a mesh"). Between crescentd processes only.

use serde::{Deserialize, Serialize};

/// The version of [`ExchangeRequest`] and [`ExchangeReply`]. A home refuses another version
/// (INVALID_ARGUMENT) rather than guess at what the sender holds.
pub const EXCHANGE_WIRE_VERSION: u32 = 1;
/// The route (POST).
pub const EXCHANGE_ROUTE: &str = "/v1/mesh/quota/exchange";
/// Most tenants one exchange carries.
pub const MAX_EXCHANGE_TENANTS: usize = 4096;

/// Bytes and objects.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Amount {
    pub bytes: u64,
    pub objects: u64,
}

/// What the sender holds of one tenant homed at the receiver.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holding {
    pub tenant: String,
    /// The most the sender may hold now (its cap); `None`: it admits the tenant without a
    /// cap (it was told the tenant is unlimited).
    pub cap: Option<Amount>,
    /// What it holds now: committed, being removed and reserved by puts in progress.
    pub held: Amount,
    /// Room it asks for beyond its cap.
    pub want: Amount,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExchangeRequest {
    /// [`EXCHANGE_WIRE_VERSION`].
    pub version: u32,
    pub mesh: String,
    /// The sending cluster.
    pub from: String,
    /// The membership generation the sender routes by: the receiver answers only at the
    /// same generation.
    pub generation: u64,
    /// The sender's run (its start, in ms) and its exchange counter in that run: a home
    /// ignores an exchange older than the newest it answered for the sender.
    pub epoch: u64,
    pub seq: u64,
    pub tenants: Vec<Holding>,
}

/// The home's answer for one tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Answer {
    /// The tenant has no limit: admit it without a cap.
    Unlimited { tenant: String },
    /// The most the sender may hold (its cap from now on), `granted` of it new room; the
    /// limits; `pressure` when the home had less room than asked recently (give back what
    /// you do not use).
    Allowance {
        tenant: String,
        allowance: Amount,
        granted: Amount,
        limits: Amount,
        pressure: bool,
    },
    /// The receiver is not the tenant's home at this generation.
    NotHome { tenant: String },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExchangeReply {
    /// [`EXCHANGE_WIRE_VERSION`].
    pub version: u32,
    pub generation: u64,
    /// One per tenant asked about, in order.
    pub answers: Vec<Answer>,
    /// Tenants homed at the receiver that have limits and that the sender did not name: it
    /// must cap them and report them in its next exchange.
    pub also_limited: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wire_form_is_pinned() {
        let reply = ExchangeReply {
            version: EXCHANGE_WIRE_VERSION,
            generation: 7,
            answers: vec![
                Answer::Unlimited { tenant: "a".into() },
                Answer::Allowance {
                    tenant: "b".into(),
                    allowance: Amount {
                        bytes: 10,
                        objects: 1,
                    },
                    granted: Amount::default(),
                    limits: Amount {
                        bytes: 100,
                        objects: 5,
                    },
                    pressure: false,
                },
                Answer::NotHome { tenant: "c".into() },
            ],
            also_limited: vec!["d".into()],
        };
        let json = serde_json::to_string(&reply).unwrap();
        assert_eq!(
            json,
            r#"{"version":1,"generation":7,"answers":[{"state":"unlimited","tenant":"a"},{"state":"allowance","tenant":"b","allowance":{"bytes":10,"objects":1},"granted":{"bytes":0,"objects":0},"limits":{"bytes":100,"objects":5},"pressure":false},{"state":"not_home","tenant":"c"}],"also_limited":["d"]}"#
        );
        assert_eq!(serde_json::from_str::<ExchangeReply>(&json).unwrap(), reply);
        let request = ExchangeRequest {
            version: 1,
            mesh: "m".into(),
            from: "east-2".into(),
            generation: 7,
            epoch: 1,
            seq: 2,
            tenants: vec![Holding {
                tenant: "b".into(),
                cap: None,
                held: Amount::default(),
                want: Amount {
                    bytes: 5,
                    objects: 1,
                },
            }],
        };
        let json = serde_json::to_string(&request).unwrap();
        assert_eq!(
            json,
            r#"{"version":1,"mesh":"m","from":"east-2","generation":7,"epoch":1,"seq":2,"tenants":[{"tenant":"b","cap":null,"held":{"bytes":0,"objects":0},"want":{"bytes":5,"objects":1}}]}"#
        );
        assert_eq!(
            serde_json::from_str::<ExchangeRequest>(&json).unwrap(),
            request
        );
    }
}
