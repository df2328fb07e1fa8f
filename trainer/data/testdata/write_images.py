#!/usr/bin/python3
"""Writes image folders with Pillow for the tests, and what they should decode to: PNG (RGB,
grayscale, RGBA, 16-bit grayscale) and JPEG files in class folders; each file's pixels as Pillow
decodes them, in RGB and in grayscale; and, as the oracle of the resize, PyTorch's bilinear
interpolation (align_corners=False, no antialiasing: tf.image.resize's bilinear) of an image.

  write_images.py DIR     prints {"pixels": {file: {"rgb": [...], "gray": [...], "size": [h, w]}},
                                  "resize": {"in": [...], "h", "w", "c", "out_h", "out_w", "out": [...]}}
"""
import json
import os
import random
import sys

try:
    import numpy as np
    from PIL import Image
except ImportError as e:  # the C++ test skips, naming the package
    print("python3-pil or numpy is not installed: %s" % e)
    sys.exit(77)


def main(out):
    rng = random.Random(9)
    os.makedirs(out + "/train/cat", exist_ok=True)
    os.makedirs(out + "/train/dog", exist_ok=True)
    os.makedirs(out + "/bad/x", exist_ok=True)
    def rand(h, w, c):
        return np.array([[[rng.randrange(256) for _ in range(c)] for _ in range(w)]
                         for _ in range(h)], dtype=np.uint8)
    files = {
        "train/cat/a.png": Image.fromarray(rand(5, 7, 3), "RGB"),
        "train/cat/b.jpg": Image.fromarray(rand(6, 4, 3), "RGB"),
        "train/dog/c.png": Image.fromarray(rand(3, 3, 1)[:, :, 0], "L"),
        "train/dog/d.png": Image.fromarray(rand(4, 5, 4), "RGBA"),
    }
    pixels = {}
    for name, img in files.items():
        path = out + "/" + name
        img.save(path, quality=95) if name.endswith(".jpg") else img.save(path)
        back = Image.open(path)
        back.load()
        if back.mode == "RGBA":  # composited onto black, as libpng's simplified API does
            rgb = Image.new("RGB", back.size)
            rgb.paste(back, mask=back.split()[3])
        else:
            rgb = back.convert("RGB")
        pixels[name] = {"rgb": np.asarray(rgb).ravel().tolist(),
                        "gray": np.asarray(back.convert("L")).ravel().tolist(),
                        "size": [back.size[1], back.size[0]], "mode": back.mode}
    # 16-bit grayscale, read as 8-bit.
    wide = (np.arange(12, dtype=np.uint16).reshape(3, 4) * 5000)
    Image.fromarray(wide, "I;16").save(out + "/train/dog/e.png")
    open(out + "/train/dog/notes.txt", "w").write("not an image")
    with open(out + "/bad/x/broken.png", "wb") as f:
        f.write(open(out + "/train/cat/a.png", "rb").read()[:40])
    with open(out + "/bad/x/text.jpg", "wb") as f:
        f.write(b"hello")
    result = {"pixels": pixels}
    try:
        import torch
        x = torch.tensor([[[rng.uniform(0, 255) for _ in range(7)] for _ in range(5)]
                          for _ in range(3)], dtype=torch.float64)  # [c, h, w]
        y = torch.nn.functional.interpolate(x[None], size=(3, 11), mode="bilinear",
                                            align_corners=False, antialias=False)[0]
        result["resize"] = {"in": x.permute(1, 2, 0).ravel().tolist(), "h": 5, "w": 7, "c": 3,
                            "out_h": 3, "out_w": 11, "out": y.permute(1, 2, 0).ravel().tolist()}
    except ImportError:
        pass
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])
