//! The DNS message code: garbage replies are errors, never panics; answers it builds parse
//! back; a query the dns outbound reads gets a reply that parses back with its id, rcode and
//! addresses.
#![no_main]
use ferry::app::dns::message;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if data.len() >= 2 {
        let id = u16::from_be_bytes([data[0], data[1]]);
        let _ = message::parse_reply(data, id);
    }
    let _ = message::question(data);
    if let Some(r) = message::answer(data, 0, &["1.2.3.4".parse().unwrap()], 60) {
        let id = u16::from_be_bytes([r[0], r[1]]);
        let _ = message::parse_reply(&r, id);
    }
    if let Some(q) = message::parse_query(data) {
        let ips = ["1.2.3.4".parse().unwrap(), "2001:db8::1".parse().unwrap()];
        let r = message::reply(&q, 3, &ips, 60);
        let p = message::parse_reply(&r, q.id).expect("a reply we built parses");
        assert_eq!(p.rcode, 3);
        let want = usize::from(q.qtype == message::A || q.qtype == message::AAAA);
        assert_eq!(p.ips.len(), want);
        assert_eq!(message::parse_query(&r).map(|b| b.qtype), Some(q.qtype));
    }
});
