// Page-side helpers of examples/servers/browser.py, evaluated in the page as one expression:
// `(LIB).name(...args)`. Every function returns plain JSON; a failure is {error: "..."}.
(() => {
  const SKIP = new Set(["SCRIPT", "STYLE", "NOSCRIPT", "TEMPLATE", "SVG", "HEAD", "META", "LINK"]);
  const norm = (s) => (s || "").replace(/\s+/g, " ").trim();
  const visible = (el) => {
    if (el.hidden || el.getAttribute("aria-hidden") === "true") return false;
    const st = getComputedStyle(el);
    return st.display !== "none" && st.visibility !== "hidden";
  };
  const unique = (sel) => {
    try { return document.querySelectorAll(sel).length === 1; } catch (e) { return false; }
  };
  const selectorOf = (el) => {
    if (el.id && unique("#" + CSS.escape(el.id))) return "#" + CSS.escape(el.id);
    const tag = el.tagName.toLowerCase();
    for (const attr of ["name", "href", "aria-label", "data-testid"]) {
      const v = el.getAttribute(attr);
      if (v && v.length < 120) {
        const sel = `${tag}[${attr}="${v.replace(/"/g, '\\"')}"]`;
        if (unique(sel)) return sel;
      }
    }
    const parts = [];
    for (let e = el; e && e.nodeType === 1 && e !== document.documentElement; e = e.parentElement) {
      if (e.id && unique("#" + CSS.escape(e.id))) { parts.unshift("#" + CSS.escape(e.id)); break; }
      const same = [...(e.parentElement ? e.parentElement.children : [])].filter((c) => c.tagName === e.tagName);
      const t = e.tagName.toLowerCase();
      parts.unshift(same.length > 1 ? `${t}:nth-of-type(${same.indexOf(e) + 1})` : t);
    }
    return parts.join(" > ");
  };
  const labelOf = (el) => {
    const aria = el.getAttribute("aria-label");
    if (aria) return norm(aria);
    if (el.labels && el.labels.length) {
      const copy = el.labels[0].cloneNode(true);  // its text without the controls inside it
      copy.querySelectorAll("input, select, textarea, button").forEach((c) => c.remove());
      return norm(copy.textContent);
    }
    return norm(el.getAttribute("placeholder") || el.getAttribute("title") || el.name || "");
  };
  const describe = (el) => {
    const tag = el.tagName.toLowerCase();
    const sel = ` [${selectorOf(el)}]`;
    if (tag === "a") return `link "${norm(el.innerText) || labelOf(el)}" -> ${el.getAttribute("href") || ""}${sel}`;
    if (tag === "button" || (tag === "input" && ["submit", "button", "reset"].includes(el.type)))
      return `button "${norm(el.innerText || el.value) || labelOf(el)}"${sel}`;
    if (tag === "select") {
      const opts = [...el.options].map((o) => norm(o.text)).join(" | ");
      const cur = el.selectedOptions.length ? norm(el.selectedOptions[0].text) : "";
      return `combobox "${labelOf(el)}" selected="${cur}" options=[${opts}]${sel}`;
    }
    if (tag === "input" && (el.type === "checkbox" || el.type === "radio"))
      return `${el.type} "${labelOf(el)}"${el.checked ? " checked" : ""}${sel}`;
    if (tag === "input" || tag === "textarea")
      return `textbox "${labelOf(el)}" value="${el.value}"${sel}`;
    if (tag === "img") return `img "${norm(el.alt)}"`;
    return `${tag} "${norm(el.innerText)}"${sel}`;
  };
  const INTERACTIVE = new Set(["A", "BUTTON", "INPUT", "SELECT", "TEXTAREA", "IMG"]);

  function snapshot(limit) {
    const lines = [];
    let pending = [];
    const flush = () => {
      const t = norm(pending.join(" "));
      if (t) lines.push(`text: ${t}`);
      pending = [];
    };
    const walk = (node, quiet) => {
      if (node.nodeType === 3) { if (!quiet) pending.push(node.textContent); return; }
      if (node.nodeType !== 1 || SKIP.has(node.tagName.toUpperCase()) || !visible(node)) return;
      const tag = node.tagName;
      if (tag === "INPUT" && node.type === "hidden") return;
      if (/^H[1-6]$/.test(tag)) { flush(); lines.push(`heading[${tag[1]}] "${norm(node.innerText)}"`); return; }
      if (INTERACTIVE.has(tag)) { flush(); lines.push(describe(node)); return; }
      if (tag === "TR") {
        flush();
        lines.push(`row: ${[...node.cells].map((c) => norm(c.innerText)).join(" | ")}`);
        node.querySelectorAll("a, button, input, select").forEach((el) => lines.push("  " + describe(el)));
        return;
      }
      const block = getComputedStyle(node).display !== "inline";
      if (block) flush();
      // A label's text is already the name of the control it holds.
      const hush = quiet || (tag === "LABEL" && !!node.querySelector("input, select, textarea"));
      node.childNodes.forEach((child) => walk(child, hush));
      if (block) flush();
    };
    if (document.body) walk(document.body, false);
    flush();
    let out = lines.join("\n");
    if (out.length > limit) out = out.slice(0, limit) + "\n(snapshot truncated)";
    return { url: location.href, title: document.title, snapshot: out };
  }

  const find = (sel) => {
    let el;
    try { el = document.querySelector(sel); } catch (e) { return { error: `invalid selector ${sel}: ${e.message}` }; }
    return el ? { el } : { error: `no element matches ${sel}` };
  };

  function click(sel) {
    const { el, error } = find(sel);
    if (error) return { error };
    el.scrollIntoView({ block: "center" });
    const what = describe(el);
    el.click();
    return { done: `clicked ${what}` };
  }

  function clickText(text) {
    const want = norm(text).toLowerCase();
    const label = (el) => norm(el.innerText || el.value || el.getAttribute("aria-label")).toLowerCase();
    const clickable = [...document.querySelectorAll(
      "a, button, input[type=submit], input[type=button], [role=button], [role=link], [role=tab], summary, label, [onclick]")]
      .filter(visible);
    let el = clickable.find((e) => label(e) === want) || clickable.find((e) => label(e).includes(want));
    if (!el) {
      const all = [...document.body.querySelectorAll("*")].filter((e) => visible(e) && label(e).includes(want));
      el = all[all.length - 1];  // document order: the last match is the innermost
    }
    if (!el) return { error: `no visible element shows the text "${text}"` };
    el.scrollIntoView({ block: "center" });
    const what = describe(el);
    el.click();
    return { done: `clicked ${what}` };
  }

  function fill(sel, value) {
    const { el, error } = find(sel);
    if (error) return { error };
    el.scrollIntoView({ block: "center" });
    el.focus();
    if (el.isContentEditable) el.textContent = value;
    else if ("value" in el && el.tagName !== "SELECT") {
      const proto = el.tagName === "TEXTAREA" ? HTMLTextAreaElement.prototype : HTMLInputElement.prototype;
      Object.getOwnPropertyDescriptor(proto, "value").set.call(el, value);
    } else return { error: `${sel} is not a text field (${el.tagName.toLowerCase()})` };
    el.dispatchEvent(new Event("input", { bubbles: true }));
    el.dispatchEvent(new Event("change", { bubbles: true }));
    return { done: `filled ${describe(el)}` };
  }

  function select(sel, value) {
    const { el, error } = find(sel);
    if (error) return { error };
    if (el.tagName !== "SELECT") return { error: `${sel} is not a <select> (${el.tagName.toLowerCase()})` };
    const want = norm(value).toLowerCase();
    const opt = [...el.options].find((o) => o.value === value)
      || [...el.options].find((o) => norm(o.text).toLowerCase() === want);
    if (!opt) return { error: `no option "${value}" in ${sel}; options: ${[...el.options].map((o) => norm(o.text)).join(", ")}` };
    el.value = opt.value;
    el.dispatchEvent(new Event("input", { bubbles: true }));
    el.dispatchEvent(new Event("change", { bubbles: true }));
    return { done: `selected "${norm(opt.text)}" in ${describe(el)}` };
  }

  function focus(sel) {
    const { el, error } = find(sel);
    if (error) return { error };
    el.focus();
    return { done: describe(el) };
  }

  function rect(sel) {
    const { el, error } = find(sel);
    if (error) return { error };
    el.scrollIntoView({ block: "center" });
    const r = el.getBoundingClientRect();
    if (!r.width || !r.height) return { error: `${sel} has no visible box` };
    return { x: r.x + scrollX, y: r.y + scrollY, width: r.width, height: r.height };
  }

  function html(sel) {
    const { el, error } = find(sel);
    return error ? { error } : { html: el.outerHTML };
  }

  function text() {
    return { text: document.body ? document.body.innerText : "" };
  }

  // Resolves true once `text` is on the page (or `gone` is off it), false after `ms`.
  function waitText(text, gone, ms) {
    const ok = () => {
      const t = document.body ? document.body.innerText : "";
      return (!text || t.includes(text)) && (!gone || !t.includes(gone));
    };
    return new Promise((resolve) => {
      if (ok()) return resolve(true);
      const obs = new MutationObserver(() => { if (ok()) { obs.disconnect(); clearTimeout(timer); resolve(true); } });
      const timer = setTimeout(() => { obs.disconnect(); resolve(false); }, ms);
      obs.observe(document, { subtree: true, childList: true, characterData: true, attributes: true });
    });
  }

  // Lets tasks queued by the last action (a form submission, a timer-0 redirect) run.
  function settle() {
    return new Promise((resolve) => setTimeout(() => setTimeout(() => resolve(true), 0), 0));
  }

  return { snapshot, click, clickText, fill, select, focus, rect, html, text, waitText, settle };
})()
