"""Pillar preprocessing of CenterPoint and PointPillars (`shared/spec/pointcloud.md`).

Three implementations produce bit-identical features and coordinates and differ only in
where each step runs on the emulated SoC: `cpu` (the AI-Benchmark reference on one A55),
`dsp2` (quantise first: DSP stage 1, CPU voxelisation, DSP stage 2) and `dsp1` (quantise
last: the DSP computes cells, the CPU voxelises raw floats, the DSP encodes, quantises and
transposes).
"""
