//! The HA pair: etcd leader election with terms, the in-sync marker, leader discovery.
