//! `vmess://` share links (base64 of a JSON object).
