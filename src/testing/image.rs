//! Image fixtures: a minimal vmlinux to read notes from.

use object::elf;

/// A minimal ELF64 (x86-64, EXEC) with one PT_NOTE segment holding `notes`.
pub fn elf_with_notes(notes: &[(&[u8], u32)]) -> Vec<u8> {
    let mut note_bytes = Vec::new();
    for (name, ty) in notes {
        let mut n = name.to_vec();
        n.push(0);
        note_bytes.extend((n.len() as u32).to_le_bytes());
        note_bytes.extend(4u32.to_le_bytes());
        note_bytes.extend(ty.to_le_bytes());
        note_bytes.extend(&n);
        while note_bytes.len() % 4 != 0 {
            note_bytes.push(0);
        }
        note_bytes.extend(0x0100_0000u32.to_le_bytes());
    }
    let mut e = vec![0u8; 64];
    e[..4].copy_from_slice(b"\x7fELF");
    e[4] = 2; // 64-bit
    e[5] = 1; // little-endian
    e[6] = 1; // version
    e[16..18].copy_from_slice(&2u16.to_le_bytes()); // ET_EXEC
    e[18..20].copy_from_slice(&62u16.to_le_bytes()); // EM_X86_64
    e[20..24].copy_from_slice(&1u32.to_le_bytes());
    e[32..40].copy_from_slice(&64u64.to_le_bytes()); // e_phoff
    e[52..54].copy_from_slice(&64u16.to_le_bytes()); // e_ehsize
    e[54..56].copy_from_slice(&56u16.to_le_bytes()); // e_phentsize
    e[56..58].copy_from_slice(&1u16.to_le_bytes()); // e_phnum
    let mut ph = vec![0u8; 56];
    ph[..4].copy_from_slice(&elf::PT_NOTE.to_le_bytes());
    let off = 64 + 56u64;
    ph[8..16].copy_from_slice(&off.to_le_bytes());
    ph[32..40].copy_from_slice(&(note_bytes.len() as u64).to_le_bytes());
    ph[40..48].copy_from_slice(&(note_bytes.len() as u64).to_le_bytes());
    ph[48..56].copy_from_slice(&4u64.to_le_bytes());
    e.extend(ph);
    e.extend(note_bytes);
    e
}
