"""gfx942 opcode numbers per encoding format (gfx942_isa.md §1.9, checked with llvm-mc-19)."""

from __future__ import annotations


def _table(spec: str) -> dict[int, str]:
    out: dict[int, str] = {}
    for item in spec.split():
        num, name = item.split(":")
        out[int(num)] = name
    return out


SOP2 = _table("""
0:s_add_u32 1:s_sub_u32 2:s_add_i32 3:s_sub_i32 4:s_addc_u32 5:s_subb_u32 6:s_min_i32 7:s_min_u32 8:s_max_i32
9:s_max_u32 10:s_cselect_b32 11:s_cselect_b64 12:s_and_b32 13:s_and_b64 14:s_or_b32 15:s_or_b64 16:s_xor_b32
17:s_xor_b64 18:s_andn2_b32 19:s_andn2_b64 20:s_orn2_b32 21:s_orn2_b64 22:s_nand_b32 23:s_nand_b64 24:s_nor_b32
25:s_nor_b64 26:s_xnor_b32 27:s_xnor_b64 28:s_lshl_b32 29:s_lshl_b64 30:s_lshr_b32 31:s_lshr_b64 32:s_ashr_i32
33:s_ashr_i64 34:s_bfm_b32 35:s_bfm_b64 36:s_mul_i32 37:s_bfe_u32 38:s_bfe_i32 39:s_bfe_u64 40:s_bfe_i64
42:s_absdiff_i32 44:s_mul_hi_u32 45:s_mul_hi_i32 46:s_lshl1_add_u32 47:s_lshl2_add_u32 48:s_lshl3_add_u32
49:s_lshl4_add_u32 50:s_pack_ll_b32_b16 51:s_pack_lh_b32_b16 52:s_pack_hh_b32_b16
""")

SOP1 = _table("""
0:s_mov_b32 1:s_mov_b64 2:s_cmov_b32 3:s_cmov_b64 4:s_not_b32 5:s_not_b64 6:s_wqm_b32 7:s_wqm_b64 8:s_brev_b32
9:s_brev_b64 10:s_bcnt0_i32_b32 11:s_bcnt0_i32_b64 12:s_bcnt1_i32_b32 13:s_bcnt1_i32_b64 14:s_ff0_i32_b32
15:s_ff0_i32_b64 16:s_ff1_i32_b32 17:s_ff1_i32_b64 18:s_flbit_i32_b32 19:s_flbit_i32_b64 20:s_flbit_i32
21:s_flbit_i32_i64 22:s_sext_i32_i8 23:s_sext_i32_i16 24:s_bitset0_b32 25:s_bitset0_b64 26:s_bitset1_b32
27:s_bitset1_b64 28:s_getpc_b64 29:s_setpc_b64 30:s_swappc_b64 31:s_rfe_b64 32:s_and_saveexec_b64
33:s_or_saveexec_b64 34:s_xor_saveexec_b64 35:s_andn2_saveexec_b64 36:s_orn2_saveexec_b64 37:s_nand_saveexec_b64
38:s_nor_saveexec_b64 39:s_xnor_saveexec_b64 40:s_quadmask_b32 41:s_quadmask_b64 42:s_movrels_b32 43:s_movrels_b64
44:s_movreld_b32 45:s_movreld_b64 48:s_abs_i32 51:s_andn1_saveexec_b64 52:s_orn1_saveexec_b64
53:s_andn1_wrexec_b64 54:s_andn2_wrexec_b64 55:s_bitreplicate_b64_b32
""")

SOPC = _table("""
0:s_cmp_eq_i32 1:s_cmp_lg_i32 2:s_cmp_gt_i32 3:s_cmp_ge_i32 4:s_cmp_lt_i32 5:s_cmp_le_i32 6:s_cmp_eq_u32
7:s_cmp_lg_u32 8:s_cmp_gt_u32 9:s_cmp_ge_u32 10:s_cmp_lt_u32 11:s_cmp_le_u32 12:s_bitcmp0_b32 13:s_bitcmp1_b32
14:s_bitcmp0_b64 15:s_bitcmp1_b64 16:s_setvskip 17:s_set_gpr_idx_on 18:s_cmp_eq_u64 19:s_cmp_lg_u64
""")

SOPK = _table("""
0:s_movk_i32 1:s_cmovk_i32 2:s_cmpk_eq_i32 3:s_cmpk_lg_i32 4:s_cmpk_gt_i32 5:s_cmpk_ge_i32 6:s_cmpk_lt_i32
7:s_cmpk_le_i32 8:s_cmpk_eq_u32 9:s_cmpk_lg_u32 10:s_cmpk_gt_u32 11:s_cmpk_ge_u32 12:s_cmpk_lt_u32 13:s_cmpk_le_u32
14:s_addk_i32 15:s_mulk_i32 17:s_getreg_b32 18:s_setreg_b32 20:s_setreg_imm32_b32 21:s_call_b64
""")

SOPP = _table("""
0:s_nop 1:s_endpgm 2:s_branch 3:s_wakeup 4:s_cbranch_scc0 5:s_cbranch_scc1 6:s_cbranch_vccz 7:s_cbranch_vccnz
8:s_cbranch_execz 9:s_cbranch_execnz 10:s_barrier 11:s_setkill 12:s_waitcnt 13:s_sethalt 14:s_sleep 15:s_setprio
16:s_sendmsg 17:s_sendmsghalt 18:s_trap 19:s_icache_inv 20:s_incperflevel 21:s_decperflevel 22:s_ttracedata
23:s_cbranch_cdbgsys 24:s_cbranch_cdbguser 25:s_cbranch_cdbgsys_or_user 26:s_cbranch_cdbgsys_and_user
27:s_endpgm_saved 28:s_set_gpr_idx_off 29:s_set_gpr_idx_mode 30:s_endpgm_ordered_ps_done
""")

SMEM = _table("""
0:s_load_dword 1:s_load_dwordx2 2:s_load_dwordx4 3:s_load_dwordx8 4:s_load_dwordx16 5:s_scratch_load_dword
6:s_scratch_load_dwordx2 7:s_scratch_load_dwordx4 8:s_buffer_load_dword 9:s_buffer_load_dwordx2
10:s_buffer_load_dwordx4 11:s_buffer_load_dwordx8 12:s_buffer_load_dwordx16 16:s_store_dword 17:s_store_dwordx2
18:s_store_dwordx4 21:s_scratch_store_dword 22:s_scratch_store_dwordx2 23:s_scratch_store_dwordx4
24:s_buffer_store_dword 25:s_buffer_store_dwordx2 26:s_buffer_store_dwordx4 32:s_dcache_inv 33:s_dcache_wb
34:s_dcache_inv_vol 35:s_dcache_wb_vol 36:s_memtime 37:s_memrealtime 38:s_atc_probe 39:s_atc_probe_buffer
40:s_dcache_discard 41:s_dcache_discard_x2
""")
for _i, _n in enumerate("swap cmpswap add sub smin umin smax umax and or xor inc dec".split()):
    SMEM[64 + _i], SMEM[96 + _i] = f"s_buffer_atomic_{_n}", f"s_buffer_atomic_{_n}_x2"
    SMEM[128 + _i], SMEM[160 + _i] = f"s_atomic_{_n}", f"s_atomic_{_n}_x2"

VOP2 = _table("""
0:v_cndmask_b32 1:v_add_f32 2:v_sub_f32 3:v_subrev_f32 4:v_fmac_f64 5:v_mul_f32 6:v_mul_i32_i24
7:v_mul_hi_i32_i24 8:v_mul_u32_u24 9:v_mul_hi_u32_u24 10:v_min_f32 11:v_max_f32 12:v_min_i32 13:v_max_i32
14:v_min_u32 15:v_max_u32 16:v_lshrrev_b32 17:v_ashrrev_i32 18:v_lshlrev_b32 19:v_and_b32 20:v_or_b32 21:v_xor_b32
23:v_fmamk_f32 24:v_fmaak_f32 25:v_add_co_u32 26:v_sub_co_u32 27:v_subrev_co_u32 28:v_addc_co_u32
29:v_subb_co_u32 30:v_subbrev_co_u32 31:v_add_f16 32:v_sub_f16 33:v_subrev_f16 34:v_mul_f16 35:v_mac_f16
36:v_madmk_f16 37:v_madak_f16 38:v_add_u16 39:v_sub_u16 40:v_subrev_u16 41:v_mul_lo_u16 42:v_lshlrev_b16
43:v_lshrrev_b16 44:v_ashrrev_i16 45:v_max_f16 46:v_min_f16 47:v_max_u16 48:v_max_i16 49:v_min_u16 50:v_min_i16
51:v_ldexp_f16 52:v_add_u32 53:v_sub_u32 54:v_subrev_u32 55:v_dot2c_f32_f16 56:v_dot2c_i32_i16 57:v_dot4c_i32_i8
58:v_dot8c_i32_i4 59:v_fmac_f32 60:v_pk_fmac_f16 61:v_xnor_b32
""")

VOP1 = _table("""
0:v_nop 1:v_mov_b32 2:v_readfirstlane_b32 3:v_cvt_i32_f64 4:v_cvt_f64_i32 5:v_cvt_f32_i32 6:v_cvt_f32_u32
7:v_cvt_u32_f32 8:v_cvt_i32_f32 10:v_cvt_f16_f32 11:v_cvt_f32_f16 12:v_cvt_rpi_i32_f32 13:v_cvt_flr_i32_f32
14:v_cvt_off_f32_i4 15:v_cvt_f32_f64 16:v_cvt_f64_f32 17:v_cvt_f32_ubyte0 18:v_cvt_f32_ubyte1 19:v_cvt_f32_ubyte2
20:v_cvt_f32_ubyte3 21:v_cvt_u32_f64 22:v_cvt_f64_u32 23:v_trunc_f64 24:v_ceil_f64 25:v_rndne_f64 26:v_floor_f64
27:v_fract_f32 28:v_trunc_f32 29:v_ceil_f32 30:v_rndne_f32 31:v_floor_f32 32:v_exp_f32 33:v_log_f32 34:v_rcp_f32
35:v_rcp_iflag_f32 36:v_rsq_f32 37:v_rcp_f64 38:v_rsq_f64 39:v_sqrt_f32 40:v_sqrt_f64 41:v_sin_f32 42:v_cos_f32
43:v_not_b32 44:v_bfrev_b32 45:v_ffbh_u32 46:v_ffbl_b32 47:v_ffbh_i32 48:v_frexp_exp_i32_f64 49:v_frexp_mant_f64
50:v_fract_f64 51:v_frexp_exp_i32_f32 52:v_frexp_mant_f32 53:v_clrexcp 56:v_mov_b64 57:v_cvt_f16_u16
58:v_cvt_f16_i16 59:v_cvt_u16_f16 60:v_cvt_i16_f16 61:v_rcp_f16 62:v_sqrt_f16 63:v_rsq_f16 64:v_log_f16 65:v_exp_f16
66:v_frexp_mant_f16 67:v_frexp_exp_i16_f16 68:v_floor_f16 69:v_ceil_f16 70:v_trunc_f16 71:v_rndne_f16 72:v_fract_f16
73:v_sin_f16 74:v_cos_f16 75:v_exp_legacy_f32 76:v_log_legacy_f32 77:v_cvt_norm_i16_f16 78:v_cvt_norm_u16_f16
79:v_sat_pk_u8_i16 81:v_swap_b32 82:v_accvgpr_mov_b32 84:v_cvt_f32_fp8 85:v_cvt_f32_bf8 86:v_cvt_pk_f32_fp8
87:v_cvt_pk_f32_bf8
""")

VOPC: dict[int, str] = {16: "v_cmp_class_f32", 17: "v_cmpx_class_f32", 18: "v_cmp_class_f64",
                        19: "v_cmpx_class_f64", 20: "v_cmp_class_f16", 21: "v_cmpx_class_f16"}
FLOAT_CMPS = "f lt eq le gt lg ge o u nge nlg ngt nle neq nlt tru".split()
INT_CMPS = "f lt eq le gt ne ge t".split()
for _base, _pre, _ty in ((32, "cmp", "f16"), (48, "cmpx", "f16"), (64, "cmp", "f32"), (80, "cmpx", "f32"),
                         (96, "cmp", "f64"), (112, "cmpx", "f64")):
    for _i, _c in enumerate(FLOAT_CMPS):
        VOPC[_base + _i] = f"v_{_pre}_{_c}_{_ty}"
for _base, _pre, _ty in ((160, "cmp", "i16"), (168, "cmp", "u16"), (176, "cmpx", "i16"), (184, "cmpx", "u16"),
                         (192, "cmp", "i32"), (200, "cmp", "u32"), (208, "cmpx", "i32"), (216, "cmpx", "u32"),
                         (224, "cmp", "i64"), (232, "cmp", "u64"), (240, "cmpx", "i64"), (248, "cmpx", "u64")):
    for _i, _c in enumerate(INT_CMPS):
        VOPC[_base + _i] = f"v_{_pre}_{_c}_{_ty}"

VOP3_ONLY = _table("""
450:v_mad_i32_i24 451:v_mad_u32_u24 452:v_cubeid_f32 453:v_cubesc_f32 454:v_cubetc_f32 455:v_cubema_f32
456:v_bfe_u32 457:v_bfe_i32 458:v_bfi_b32 459:v_fma_f32 460:v_fma_f64 461:v_lerp_u8 462:v_alignbit_b32
463:v_alignbyte_b32 464:v_min3_f32 465:v_min3_i32 466:v_min3_u32 467:v_max3_f32 468:v_max3_i32 469:v_max3_u32
470:v_med3_f32 471:v_med3_i32 472:v_med3_u32 473:v_sad_u8 474:v_sad_hi_u8 475:v_sad_u16 476:v_sad_u32
477:v_cvt_pk_u8_f32 478:v_div_fixup_f32 479:v_div_fixup_f64 480:v_div_scale_f32 481:v_div_scale_f64
482:v_div_fmas_f32 483:v_div_fmas_f64 484:v_msad_u8 485:v_qsad_pk_u16_u8 486:v_mqsad_pk_u16_u8 487:v_mqsad_u32_u8
488:v_mad_u64_u32 489:v_mad_i64_i32 490:v_mad_legacy_f16 491:v_mad_legacy_u16 492:v_mad_legacy_i16 493:v_perm_b32
494:v_fma_legacy_f16 495:v_div_fixup_legacy_f16 496:v_cvt_pkaccum_u8_f32 497:v_mad_u32_u16 498:v_mad_i32_i16
499:v_xad_u32 500:v_min3_f16 501:v_min3_i16 502:v_min3_u16 503:v_max3_f16 504:v_max3_i16 505:v_max3_u16
506:v_med3_f16 507:v_med3_i16 508:v_med3_u16 509:v_lshl_add_u32 510:v_add_lshl_u32 511:v_add3_u32
512:v_lshl_or_b32 513:v_and_or_b32 514:v_or3_b32 515:v_mad_f16 516:v_mad_u16 517:v_mad_i16 518:v_fma_f16
519:v_div_fixup_f16 520:v_lshl_add_u64 640:v_add_f64 641:v_mul_f64 642:v_min_f64 643:v_max_f64 644:v_ldexp_f64
645:v_mul_lo_u32 646:v_mul_hi_u32 647:v_mul_hi_i32 648:v_ldexp_f32 649:v_readlane_b32 650:v_writelane_b32
651:v_bcnt_u32_b32 652:v_mbcnt_lo_u32_b32 653:v_mbcnt_hi_u32_b32 655:v_lshlrev_b64 656:v_lshrrev_b64
657:v_ashrrev_i64 658:v_trig_preop_f64 659:v_bfm_b32 660:v_cvt_pknorm_i16_f32 661:v_cvt_pknorm_u16_f32
662:v_cvt_pkrtz_f16_f32 663:v_cvt_pk_u16_u32 664:v_cvt_pk_i16_i32 665:v_cvt_pknorm_i16_f16 666:v_cvt_pknorm_u16_f16
668:v_add_i32 669:v_sub_i32 670:v_add_i16 671:v_sub_i16 672:v_pack_b32_f16 673:v_mul_legacy_f32
674:v_cvt_pk_fp8_f32 675:v_cvt_pk_bf8_f32 676:v_cvt_sr_fp8_f32 677:v_cvt_sr_bf8_f32
""")

# VOP3 opcode space: VOPC 0-255, VOP2 + 256, VOP1 + 320, VOP3-only 448+. These VOP1/VOP2 ops have no VOP3 form
# (llvm-mc-19 decodes none of them): the K-constant forms, v_pk_fmac_f16, v_readfirstlane, v_swap, v_accvgpr_mov.
VOP3: dict[int, str] = {**VOPC, **{k + 256: v for k, v in VOP2.items() if k not in (23, 24, 36, 37, 60)},
                        **{k + 320: v for k, v in VOP1.items() if k not in (2, 81, 82)}, **VOP3_ONLY}
# VOP3B (sdst in bits 14:8) opcodes.
VOP3B_OPS = frozenset({281, 282, 283, 284, 285, 286, 480, 481, 488, 489})

VOP3P = _table("""
0:v_pk_mad_i16 1:v_pk_mul_lo_u16 2:v_pk_add_i16 3:v_pk_sub_i16 4:v_pk_lshlrev_b16 5:v_pk_lshrrev_b16
6:v_pk_ashrrev_i16 7:v_pk_max_i16 8:v_pk_min_i16 9:v_pk_mad_u16 10:v_pk_add_u16 11:v_pk_sub_u16 12:v_pk_max_u16
13:v_pk_min_u16 14:v_pk_fma_f16 15:v_pk_add_f16 16:v_pk_mul_f16 17:v_pk_min_f16 18:v_pk_max_f16 32:v_fma_mix_f32
33:v_fma_mixlo_f16 34:v_fma_mixhi_f16 35:v_dot2_f32_f16 38:v_dot2_i32_i16 39:v_dot2_u32_u16 40:v_dot4_i32_i8
41:v_dot4_u32_u8 42:v_dot8_i32_i4 43:v_dot8_u32_u4 48:v_pk_fma_f32 49:v_pk_mul_f32 50:v_pk_add_f32 51:v_pk_mov_b32
88:v_accvgpr_read_b32 89:v_accvgpr_write_b32
62:v_mfma_f32_16x16x8_xf32 63:v_mfma_f32_32x32x4_xf32 64:v_mfma_f32_32x32x1_2b_f32 65:v_mfma_f32_16x16x1_4b_f32
66:v_mfma_f32_4x4x1_16b_f32 68:v_mfma_f32_32x32x2_f32 69:v_mfma_f32_16x16x4_f32 72:v_mfma_f32_32x32x4_2b_f16
73:v_mfma_f32_16x16x4_4b_f16 74:v_mfma_f32_4x4x4_16b_f16 76:v_mfma_f32_32x32x8_f16 77:v_mfma_f32_16x16x16_f16
86:v_mfma_i32_32x32x16_i8 87:v_mfma_i32_16x16x32_i8 96:v_mfma_f32_32x32x8_bf16 97:v_mfma_f32_16x16x16_bf16
110:v_mfma_f64_16x16x4_f64 112:v_mfma_f32_16x16x32_bf8_bf8 113:v_mfma_f32_16x16x32_bf8_fp8
114:v_mfma_f32_16x16x32_fp8_bf8 115:v_mfma_f32_16x16x32_fp8_fp8 116:v_mfma_f32_32x32x16_bf8_bf8
117:v_mfma_f32_32x32x16_bf8_fp8 118:v_mfma_f32_32x32x16_fp8_bf8 119:v_mfma_f32_32x32x16_fp8_fp8
""")

DS = _table("""
0:ds_add_u32 1:ds_sub_u32 2:ds_rsub_u32 3:ds_inc_u32 4:ds_dec_u32 5:ds_min_i32 6:ds_max_i32 7:ds_min_u32
8:ds_max_u32 9:ds_and_b32 10:ds_or_b32 11:ds_xor_b32 12:ds_mskor_b32 13:ds_write_b32 14:ds_write2_b32
15:ds_write2st64_b32 16:ds_cmpst_b32 17:ds_cmpst_f32 18:ds_min_f32 19:ds_max_f32 21:ds_add_f32 23:ds_pk_add_f16
24:ds_pk_add_bf16 30:ds_write_b8 31:ds_write_b16 32:ds_add_rtn_u32 33:ds_sub_rtn_u32 34:ds_rsub_rtn_u32
35:ds_inc_rtn_u32 36:ds_dec_rtn_u32 37:ds_min_rtn_i32 38:ds_max_rtn_i32 39:ds_min_rtn_u32 40:ds_max_rtn_u32
41:ds_and_rtn_b32 42:ds_or_rtn_b32 43:ds_xor_rtn_b32 44:ds_mskor_rtn_b32 45:ds_wrxchg_rtn_b32
46:ds_wrxchg2_rtn_b32 47:ds_wrxchg2st64_rtn_b32 48:ds_cmpst_rtn_b32 49:ds_cmpst_rtn_f32 50:ds_min_rtn_f32
51:ds_max_rtn_f32 52:ds_wrap_rtn_b32 53:ds_add_rtn_f32 54:ds_read_b32 55:ds_read2_b32 56:ds_read2st64_b32
57:ds_read_i8 58:ds_read_u8 59:ds_read_i16 60:ds_read_u16 61:ds_swizzle_b32 62:ds_permute_b32 63:ds_bpermute_b32
64:ds_add_u64 65:ds_sub_u64 66:ds_rsub_u64 67:ds_inc_u64 68:ds_dec_u64 69:ds_min_i64 70:ds_max_i64 71:ds_min_u64
72:ds_max_u64 73:ds_and_b64 74:ds_or_b64 75:ds_xor_b64 76:ds_mskor_b64 77:ds_write_b64 78:ds_write2_b64
79:ds_write2st64_b64 80:ds_cmpst_b64 81:ds_cmpst_f64 82:ds_min_f64 83:ds_max_f64 84:ds_write_b8_d16_hi
85:ds_write_b16_d16_hi 86:ds_read_u8_d16 87:ds_read_u8_d16_hi 88:ds_read_i8_d16 89:ds_read_i8_d16_hi
90:ds_read_u16_d16 91:ds_read_u16_d16_hi 92:ds_add_f64 96:ds_add_rtn_u64 97:ds_sub_rtn_u64 98:ds_rsub_rtn_u64
99:ds_inc_rtn_u64 100:ds_dec_rtn_u64 101:ds_min_rtn_i64 102:ds_max_rtn_i64 103:ds_min_rtn_u64 104:ds_max_rtn_u64
105:ds_and_rtn_b64 106:ds_or_rtn_b64 107:ds_xor_rtn_b64 108:ds_mskor_rtn_b64 109:ds_wrxchg_rtn_b64
110:ds_wrxchg2_rtn_b64 111:ds_wrxchg2st64_rtn_b64 112:ds_cmpst_rtn_b64 113:ds_cmpst_rtn_f64 114:ds_min_rtn_f64
115:ds_max_rtn_f64 118:ds_read_b64 119:ds_read2_b64 120:ds_read2st64_b64 124:ds_add_rtn_f64
126:ds_condxchg32_rtn_b64 183:ds_pk_add_rtn_f16 184:ds_pk_add_rtn_bf16 222:ds_write_b96 223:ds_write_b128
254:ds_read_b96 255:ds_read_b128
""")

FLAT = _table("""
16:load_ubyte 17:load_sbyte 18:load_ushort 19:load_sshort 20:load_dword 21:load_dwordx2 22:load_dwordx3
23:load_dwordx4 24:store_byte 25:store_byte_d16_hi 26:store_short 27:store_short_d16_hi 28:store_dword
29:store_dwordx2 30:store_dwordx3 31:store_dwordx4 32:load_ubyte_d16 33:load_ubyte_d16_hi 34:load_sbyte_d16
35:load_sbyte_d16_hi 36:load_short_d16 37:load_short_d16_hi 38:load_lds_ubyte 39:load_lds_sbyte
40:load_lds_ushort 41:load_lds_sshort 42:load_lds_dword 64:atomic_swap 65:atomic_cmpswap 66:atomic_add
67:atomic_sub 68:atomic_smin 69:atomic_umin 70:atomic_smax 71:atomic_umax 72:atomic_and 73:atomic_or 74:atomic_xor
75:atomic_inc 76:atomic_dec 77:atomic_add_f32 78:atomic_pk_add_f16 79:atomic_add_f64 80:atomic_min_f64
81:atomic_max_f64 82:atomic_pk_add_bf16 96:atomic_swap_x2 97:atomic_cmpswap_x2 98:atomic_add_x2 99:atomic_sub_x2
100:atomic_smin_x2 101:atomic_umin_x2 102:atomic_smax_x2 103:atomic_umax_x2 104:atomic_and_x2 105:atomic_or_x2
106:atomic_xor_x2 107:atomic_inc_x2 108:atomic_dec_x2
""")

MUBUF = _table("""
0:buffer_load_format_x 1:buffer_load_format_xy 2:buffer_load_format_xyz 3:buffer_load_format_xyzw
4:buffer_store_format_x 5:buffer_store_format_xy 6:buffer_store_format_xyz 7:buffer_store_format_xyzw
40:buffer_wbl2 41:buffer_inv 62:buffer_wbinvl1 63:buffer_wbinvl1_vol
""")
MUBUF.update({k: "buffer_" + v for k, v in FLAT.items() if not v.startswith("load_lds") and v != "atomic_pk_add_bf16"})

FORMAT_TABLES: dict[str, dict[int, str]] = {
    "SOP2": SOP2, "SOP1": SOP1, "SOPC": SOPC, "SOPK": SOPK, "SOPP": SOPP, "SMEM": SMEM, "VOP2": VOP2, "VOP1": VOP1,
    "VOPC": VOPC, "VOP3": VOP3, "VOP3P": VOP3P, "DS": DS, "MUBUF": MUBUF,
}
