// esbuild bundles CSS imported for its side effect (src/style.css → assets/app.css).
declare module "*.css";
