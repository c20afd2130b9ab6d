//! One AES block (ECB): the 2022 identity header (EIH) and UDP separate headers.

use aes::cipher::{Array, BlockCipherDecrypt, BlockCipherEncrypt, KeyInit};

/// One AES block (ECB) with a 16- or 32-byte key: 2022 EIH and UDP separate headers.
#[derive(Clone)]
pub enum AesBlock {
    A128(Box<aes::Aes128>),
    A256(Box<aes::Aes256>),
}

impl AesBlock {
    /// `None` when the key is neither 16 nor 32 bytes.
    pub fn new(key: &[u8]) -> Option<AesBlock> {
        match key.len() {
            16 => aes::Aes128::new_from_slice(key)
                .ok()
                .map(|c| AesBlock::A128(Box::new(c))),
            32 => aes::Aes256::new_from_slice(key)
                .ok()
                .map(|c| AesBlock::A256(Box::new(c))),
            _ => None,
        }
    }

    pub fn encrypt(&self, block: &mut [u8; 16]) {
        let b: &mut Array<u8, _> = block.into();
        match self {
            AesBlock::A128(c) => c.encrypt_block(b),
            AesBlock::A256(c) => c.encrypt_block(b),
        }
    }

    pub fn decrypt(&self, block: &mut [u8; 16]) {
        let b: &mut Array<u8, _> = block.into();
        match self {
            AesBlock::A128(c) => c.decrypt_block(b),
            AesBlock::A256(c) => c.decrypt_block(b),
        }
    }
}
