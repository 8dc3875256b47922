//! TODO(testing)

pub(crate) mod sync_points;
#[cfg(test)]
pub(crate) mod test_data;
