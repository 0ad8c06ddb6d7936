//! The safetensors header parser (client/src/weights/manifest.rs) that reads model files
//! from disk before they are stored.

use crescent_client::weights::manifest::parse_safetensors;

pub fn safetensors_header(data: &[u8]) {
    if let Ok(layout) = parse_safetensors("fuzz.safetensors", data) {
        let data_len = (data.len() - layout.data_start) as u64;
        // The spans cover the data region exactly, in order.
        let mut at = 0;
        for (_, start, end) in &layout.spans {
            assert_eq!(*start, at, "spans are contiguous");
            assert!(start <= end);
            at = *end;
        }
        assert_eq!(at, data_len, "spans cover the data region");
    }
}

fn file(header: &str, data: usize) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend(std::iter::repeat_n(1u8, data));
    out
}

pub fn seeds() -> Vec<Vec<u8>> {
    vec![
        file(
            r#"{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F16","shape":[1,2],"data_offsets":[12,16]}}"#,
            20,
        ),
        file("{}", 0),
    ]
}
