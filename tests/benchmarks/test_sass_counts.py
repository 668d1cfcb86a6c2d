"""benchmarks/sass_counts.py reads cuobjdump's SASS text: opcodes past 64 KiB of code and after a
guard, the inner loop, the bytes its global loads request, and the subnormal range checks."""

import importlib
import re

import pytest

from zoomattn.config import ROOT


@pytest.fixture
def sass_counts(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    return importlib.import_module("sass_counts")


def test_opcodes_are_counted_past_the_first_64_kib_of_code_and_after_a_guard(sass_counts):
    sass = """
        /*fff0*/                   MUFU.EX2 R1, R2 ;
        /*10000*/                  HGMMA.64x16x16.F32.BF16 R24, gdesc[UR4], RZ ;
        /*10010*/              @!P3 BRA 0x2630 ;
        /*10020*/               @P1 MUFU.RCP R5, R6 ;
    """
    assert sass_counts.opcode_counts(sass) == {"MUFU": 2, "HGMMA": 1, "BRA": 1}


LOOPS = """
    /*0000*/                   MOV R1, c[0x0][0x28] ;
    /*0010*/                   HGMMA.64x32x16.F32.BF16 R24, gdesc[UR4], RZ ;
    /*0020*/                   MUFU.EX2 R2, R3 ;
    /*0030*/                   FADD R4, R2, 1 ;
    /*0040*/               @P0 BRA.U !UP0, 0x10 ;
    /*0050*/                   MUFU.RCP R5, R4 ;
    /*0060*/              @!P1 BRA 0x0 ;
    /*0070*/                   FMUL R6, R5, R5 ;
    /*0080*/              @!P2 BRA 0x70 ;
    /*0090*/                   BRA 0x90;
"""


def test_the_inner_loop_is_the_shortest_loop_back_holding_a_product_or_a_special_function(
    sass_counts,
):
    loop = sass_counts.inner_loop(LOOPS)
    assert loop == {"HGMMA.64x32x16.F32.BF16": 1, "MUFU.EX2": 1, "FADD": 1, "BRA.U": 1}
    assert sass_counts.base(loop) == {"HGMMA": 1, "MUFU": 1, "FADD": 1, "BRA": 1}
    fp32 = LOOPS.replace("HGMMA.64x32x16.F32.BF16 R24, gdesc[UR4], RZ", "FFMA R24, R25, R26, R24")
    # fp32 inputs: products as FMAs, the loop that holds a special function
    assert sass_counts.base(sass_counts.inner_loop(fp32)) == {
        "FFMA": 1, "MUFU": 1, "FADD": 1, "BRA": 1
    }  # fmt: skip


def test_a_loops_load_bytes_are_its_global_loads_by_width(sass_counts):
    sass = """
        /*0000*/                   LDG.E.128 R4, desc[UR4][R2.64] ;
        /*0010*/              @!P1 LDGSTS.E.BYPASS.128 [R160+0x7800], desc[UR16][R88.64], P2 ;
        /*0020*/              @!P1 LDGSTS.E [R160+0x7820], desc[UR16][R96.64], P2 ;
        /*0030*/                   LDG.E.U8 R7, desc[UR4][R8.64] ;
        /*0040*/                   LDG.E.64 R10, desc[UR4][R12.64] ;
        /*0048*/                   LDG.E.128.CONSTANT R14, desc[UR4][R12.64] ;
        /*004c*/                   LDG.E.U16.STRONG.GPU R15, desc[UR4][R12.64] ;
        /*004e*/                   LDGSTS.E.BYPASS.LTC128B.128.ZFILL [R1], desc[UR4][R2.64] ;
        /*0050*/                   LDS.128 R20, [R3] ;
        /*0060*/                   LDSM.16.M88.4 R24, [R5] ;
        /*0070*/                   HMMA.16816.F32.BF16 R24, R4, R8, R24 ;
        /*0080*/              @!P0 BRA 0x0 ;
    """
    loop = sass_counts.inner_loop(sass)
    # shared-memory loads (LDS, LDSM) are not global: 16 + 16 + 4 + 1 + 8, and the widths
    # before other modifiers: 16 + 2 + 16
    assert sass_counts.load_bytes(loop) == 45 + 34
    tma = sass.replace("LDG.E.64 R10, desc[UR4][R12.64]", "UTMALDG.2D [UR8], [UR10]")
    assert sass_counts.load_bytes(sass_counts.inner_loop(tma)) is None


def test_subnormal_checks_are_counted_around_exponentials_divisions_and_logarithms(sass_counts):
    sass = """
        /*0100*/                   FSETP.GEU.AND P6, PT, R111, -126, PT ;
        /*0110*/                   FSETP.GT.AND P5, PT, R89, 8.50705917302346158658e+37, PT ;
        /*0120*/                   FSETP.GEU.AND P5, PT, |R147|, 1.175494350822287508e-38, PT ;
        /*0130*/                   FSETP.GEU.AND P2, PT, R3, -12, PT ;
    """
    assert len(re.findall(sass_counts.SUBNORMAL_CHECK, sass)) == 3
