//! TODO(testing)

pub(crate) mod fault_injection;
pub(crate) mod sync_points;
#[cfg(test)]
pub(crate) mod test_data;
