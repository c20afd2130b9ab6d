//! The multi-file merge of configs, as Xray does it.

use serde_json::Value;

/// Merges several config files the way Xray does (untitled sources; see [`merge_named`]).
pub fn merge(docs: Vec<Value>) -> Value {
    merge_named(docs.into_iter().map(|d| (String::new(), d)).collect())
}

/// The `tag` of an inbound/outbound item (any key case); missing = "".
fn item_tag(v: &Value) -> &str {
    v.as_object()
        .and_then(|m| m.iter().find(|(k, _)| k.eq_ignore_ascii_case("tag")))
        .and_then(|(_, t)| t.as_str())
        .unwrap_or("")
}

/// Merges several config files as Xray does: the first file is taken as it is (so duplicate
/// tags inside one file stay and are reported); each later file then overrides it: an inbound
/// or outbound with the tag of an existing one replaces it, other inbounds are appended, other
/// outbounds are put first (they become the default) unless the file name contains "tail";
/// any other top-level object replaces the earlier one.
pub fn merge_named(docs: Vec<(String, Value)>) -> Value {
    let mut it = docs.into_iter();
    let mut out = match it.next() {
        Some((_, Value::Object(m))) => m,
        Some((_, other)) => return other,
        None => serde_json::Map::new(),
    };
    for (name, doc) in it {
        let Value::Object(m) = doc else { continue };
        let tail = name.to_ascii_lowercase().contains("tail");
        for (k, v) in m {
            let key = k.to_ascii_lowercase();
            let existing = out.keys().find(|e| e.eq_ignore_ascii_case(&k)).cloned();
            if let ("inbounds" | "outbounds", Value::Array(src), Some(ek)) =
                (key.as_str(), &v, &existing)
            {
                if let Some(Value::Array(dst)) = out.get_mut(ek) {
                    let mut prepend = Vec::new();
                    for item in src {
                        let tag = item_tag(item);
                        match dst.iter().position(|d| item_tag(d) == tag) {
                            Some(i) => {
                                if let Some(slot) = dst.get_mut(i) {
                                    *slot = item.clone();
                                }
                            }
                            None if key == "outbounds" && !tail => prepend.push(item.clone()),
                            None => dst.push(item.clone()),
                        }
                    }
                    if !prepend.is_empty() {
                        dst.splice(0..0, prepend);
                    }
                    continue;
                }
            }
            if let Some(ek) = existing {
                out.remove(&ek);
            }
            out.insert(k, v);
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn outbound_tags(m: &Value) -> Vec<&str> {
        m["outbounds"]
            .as_array()
            .unwrap()
            .iter()
            .map(item_tag)
            .collect()
    }

    #[test]
    fn merge_concatenates_and_replaces_by_tag() {
        let a = json!({"inbounds": [{"tag": "a", "port": 1}], "log": {"loglevel": "debug"}});
        let b = json!({"inbounds": [{"tag": "a", "port": 2}, {"tag": "b"}], "log": {"loglevel": "info"}});
        let m = merge(vec![a, b]);
        assert_eq!(m["inbounds"].as_array().unwrap().len(), 2);
        assert_eq!(m["inbounds"][0]["port"], 2);
        assert_eq!(m["log"]["loglevel"], "info");
    }

    #[test]
    fn merge_keeps_duplicates_of_the_first_file_and_prepends_outbounds() {
        let a = json!({"outbounds": [{"tag": "x"}, {"tag": "x"}]});
        let m = merge(vec![a.clone()]);
        assert_eq!(m["outbounds"].as_array().unwrap().len(), 2);
        let b = json!({"Outbounds": [{"tag": "y"}, {"Tag": "x", "protocol": "p"}]});
        let m = merge_named(vec![
            ("a.json".into(), a.clone()),
            ("b.json".into(), b.clone()),
        ]);
        let tags = outbound_tags(&m);
        assert_eq!(tags, ["y", "x", "x"]);
        assert_eq!(m["outbounds"][1]["protocol"], "p");
        let m = merge_named(vec![("a.json".into(), a), ("20_TAIL.json".into(), b)]);
        let tags = outbound_tags(&m);
        assert_eq!(tags, ["x", "x", "y"]);
    }
}
