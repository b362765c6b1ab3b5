/** Files embedded with `import … with { type: 'file' }` resolve to a path, inside the binary when compiled. */
declare module 'swagger-ui-dist/swagger-ui-bundle.js' {
  const path: string
  export default path
}
declare module '*.css' {
  const path: string
  export default path
}
