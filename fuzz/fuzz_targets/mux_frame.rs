//! Mux.Cool/XUDP frame decoder: never panics on any bytes; a decoded frame lies inside the
//! input, and its metadata re-encodes (with its data) to a frame that decodes the same.
#![no_main]
use ferry::proxy::mux::frame;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = frame::is_xudp(data);
    let _ = frame::decode_meta(data);
    let mut at = 0;
    while let Ok(Some(f)) = frame::decode(&data[at..]) {
        assert!(f.len <= data.len() - at && f.data.end <= f.len && f.data.start <= f.data.end);
        let body = &data[at..][f.data.clone()];
        let mut again = Vec::new();
        let payload = f.meta.has_data().then_some(body);
        frame::encode(&f.meta, payload, &mut again);
        assert_eq!(again.len(), frame::encoded_len(&f.meta, payload.map(<[u8]>::len)));
        let back = frame::decode(&again).unwrap().unwrap();
        assert_eq!(back.len, again.len());
        assert_eq!(&again[back.data.clone()], body);
        assert_eq!((back.meta.id, back.meta.status), (f.meta.id, f.meta.status));
        assert_eq!(back.meta.target, f.meta.target);
        assert_eq!(back.meta.global_id, f.meta.global_id);
        at += f.len;
    }
});
