// Fixed paper list: [arXiv-style id, title, authors, year]
const PAPERS = [
  ["2201.12086", "BLIP: Bootstrapping Language-Image Pre-training for Unified Vision-Language Understanding and Generation", "Li, Li, Xiong, Hoi", 2022],
  ["2301.12597", "BLIP-2: Bootstrapping Language-Image Pre-training with Frozen Image Encoders and Large Language Models", "Li, Li, Savarese, Hoi", 2023],
  ["2305.06500", "InstructBLIP: Towards General-purpose Vision-Language Models with Instruction Tuning", "Dai, Li, Li, et al.", 2023],
  ["2304.12244", "WizardLM: Empowering Large Pre-trained Language Models to Follow Complex Instructions", "Xu, Sun, Zheng, et al.", 2023],
  ["2306.08568", "WizardCoder: Empowering Code Large Language Models with Evol-Instruct", "Luo, Xu, Zhao, et al.", 2023],
  ["2308.09583", "WizardMath: Empowering Mathematical Reasoning for Large Language Models via Reinforced Evol-Instruct", "Luo, Sun, Xu, et al.", 2023],
  ["2304.08485", "Visual Instruction Tuning", "Liu, Li, Wu, Lee", 2023],
  ["1706.03762", "Attention Is All You Need", "Vaswani, Shazeer, Parmar, et al.", 2017],
];
