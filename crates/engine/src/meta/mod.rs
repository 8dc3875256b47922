//! The metadata in redb: the tables and their value encodings (`schema`),
//! opening the file (`file`), the store every commit goes through and the read
//! view readers share (`store`), the live point mappings kept a chunk of grains
//! to a row (`point_rows`), and the cache of committed mappings each commit
//! keeps in step (`mapping_cache`), and the sync pipeline under redb that
//! lets a durable commit become durable after the writer mutex is released
//! (`sync_pipeline`, over byte `pieces` held in memory).
//!
//! Does not decide what to write: the write path, versions and reclaim do.
//!
//! May use: `segment` (a commit writes segment tails back before it commits),
//! `testing`.

pub(crate) mod file;
pub(crate) mod mapping_cache;
pub mod pieces;
pub(crate) mod point_rows;
pub mod schema;
pub(crate) mod store;
pub(crate) mod sync_pipeline;
