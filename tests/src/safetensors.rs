//! Small .safetensors files for the weight tests (docs/weights.md).

/// A safetensors file of `tensors` U8 tensors of `len` bytes each, deterministic in `seed`.
pub fn safetensors(tensors: usize, len: usize, seed: u8) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    for t in 0..tensors {
        header.insert(
            format!("layer.{t}.weight"),
            serde_json::json!({"dtype": "U8", "shape": [len], "data_offsets": [t * len, (t + 1) * len]}),
        );
    }
    let mut text = serde_json::to_string(&header).unwrap();
    while !text.len().is_multiple_of(8) {
        text.push(' ');
    }
    let mut file = (text.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(text.as_bytes());
    file.extend((0..tensors * len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)));
    file
}
