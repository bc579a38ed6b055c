//! Checks that keep the repository true to itself, for the crates' tests: the reference pages
//! against the binaries and the operators' registries ([`reference_docs`]), the shipped RBAC
//! against the API calls each operator's code lists ([`rbac`]), and import cycles between a
//! crate's modules ([`module_graph`]). They read files and run the binaries' `--help`; no
//! server is started.

pub mod module_graph;
pub mod rbac;
pub mod reference_docs;
