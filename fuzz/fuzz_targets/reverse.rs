//! VLESS Reverse's decoders: the control message (any bytes: never panics, the same answer
//! for the same bytes) and the reverse mux's frames (New frames with an origin): a decoded
//! frame lies inside the input and re-encodes to a frame that decodes the same.
#![no_main]
use ferry::proxy::mux::frame;
use ferry::proxy::reverse::Control;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(c) = Control::decode(data) {
        assert_eq!(Control::decode(data), Ok(c));
    }
    let mut at = 0;
    while let Ok(Some(f)) = frame::decode_in(&data[at..], true) {
        assert!(f.len <= data.len() - at && f.data.end <= f.len && f.data.start <= f.data.end);
        let body = &data[at..][f.data.clone()];
        let payload = f.meta.has_data().then_some(body);
        let mut again = Vec::new();
        frame::encode(&f.meta, payload, &mut again);
        assert_eq!(again.len(), frame::encoded_len(&f.meta, payload.map(<[u8]>::len)));
        let back = frame::decode_in(&again, true).unwrap().unwrap();
        assert_eq!(back.len, again.len());
        assert_eq!(&again[back.data.clone()], body);
        assert_eq!(back.meta.target, f.meta.target);
        assert_eq!(back.meta.origin, f.meta.origin);
        at += f.len;
    }
});
