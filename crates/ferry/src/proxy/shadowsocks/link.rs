//! SIP002 `ss://` links.
