"""bench/studies/sass_loop_counts.py on a hand-made listing: the steady path round the WGMMA wait."""

from bench.studies.sass_loop_counts import report

LISTING = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   VIADD R2, R2, 0x1 ;
        /*0020*/              @!P0 BRA 0x50 ;
        /*0030*/                   LDS R3, [R4] ;
        /*0040*/                   LDS R5, [R4+0x4] ;
        /*0050*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR7], R24 ;
        /*0060*/              @!P0 BRA 0xf0 ;
        /*0070*/                   QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR12], R24, gsb0 ;
        /*0080*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*0090*/                   F2FP.RELU.BF16.F32.PACK_AB R24, R25, R24 ;
        /*00a0*/                   HFMA2.BF16_V2 R26, R24, R3, R26 ;
        /*00b0*/                   SHFL.BFLY PT, R27, R26, 0x1, 0x1f ;
        /*00c0*/                   STG.E desc[UR34][R8.64], R27 ;
        /*00d0*/              @!P1 EXIT ;
        /*00e0*/                   BRA 0x10 ;
        /*00f0*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR7], R24 ;
        /*0100*/              @!P0 BRA 0xf0 ;
        /*0110*/                   BRA 0x70 ;
"""


def test_the_loop_round_the_wait_skips_the_request_change_and_not_the_retry():
    [(total, classes, taken)] = report(LISTING)
    assert taken == [(0x20, 0x50)]  # the weights' loads skipped; the try-wait's retry (to 0xf0) not followed
    assert total == 12 and classes["LDS"] == 0
    assert (classes["F2FP"], classes["HFMA2/HMUL2"], classes["SHFL"], classes["STG"]) == (1, 1, 1, 1)
    assert (classes["QGMMA"], classes["WARPGROUP"], classes["SYNCS"], classes["control"]) == (1, 1, 1, 4)
